//! read_file, write_file, patch and search_files, and their confinement to
//! the session workspace.

use crate::common;
use common::tools::runtime;

use common::call;
use serde_json::json;

/// Writes a file, reads a range of it and writes it again.
async fn write_then_read() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let body: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    let wrote = call(
        &rt,
        "write_file",
        json!({"path": "notes/a.txt", "content": body}),
        &ctx,
    )
    .await;
    assert_eq!(wrote["created"], true, "{wrote}");
    assert_eq!(wrote["path"], "notes/a.txt");
    let read = call(
        &rt,
        "read_file",
        json!({"path": "notes/a.txt", "offset": "10", "limit": 3}),
        &ctx,
    )
    .await;
    assert_eq!(read["total_lines"], 50);
    assert_eq!(read["start_line"], 10);
    assert_eq!(read["end_line"], 12);
    assert_eq!(read["more"], true);
    assert_eq!(
        read["content"],
        "    10\tline 10\n    11\tline 11\n    12\tline 12"
    );
    let again = call(
        &rt,
        "write_file",
        json!({"path": "notes/a.txt", "content": "x"}),
        &ctx,
    )
    .await;
    assert_eq!(again["created"], false);
}

/// On a one-thread runtime (a command at the terminal) the file is read
/// and written on the runtime's thread.
#[tokio::test]
async fn write_then_read_ranges() {
    write_then_read().await;
}

/// On the daemon's runtime, on the blocking pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_then_read_ranges_on_a_runtime_of_several_threads() {
    write_then_read().await;
}

#[tokio::test]
async fn read_refuses_binary_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    std::fs::write(ctx.workspace.join("bin.dat"), [0u8, 1, 2, 0]).unwrap();
    let bin = call(&rt, "read_file", json!({"path": "bin.dat"}), &ctx).await;
    assert!(bin["error"].as_str().unwrap().contains("binary"), "{bin}");
    let d = call(&rt, "read_file", json!({"path": "."}), &ctx).await;
    assert!(d["error"].as_str().unwrap().contains("directory"), "{d}");
}

#[tokio::test]
async fn patch_exact_fuzzy_and_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    std::fs::write(
        ctx.workspace.join("m.rs"),
        "fn a() {\n    let x =   1;\n}\nfn b() {}\nfn b() {}\n",
    )
    .unwrap();
    let exact = call(
        &rt,
        "patch",
        json!({"path": "m.rs", "old_string": "fn a()", "new_string": "fn alpha()"}),
        &ctx,
    )
    .await;
    assert_eq!(exact["replacements"], 1, "{exact}");
    assert_eq!(exact["whitespace_tolerant"], false);
    let fuzzy = call(
        &rt,
        "patch",
        json!({"path": "m.rs", "old_string": "let x = 1;", "new_string": "    let x = 2;"}),
        &ctx,
    )
    .await;
    assert_eq!(fuzzy["whitespace_tolerant"], true, "{fuzzy}");
    let ambiguous = call(
        &rt,
        "patch",
        json!({"path": "m.rs", "old_string": "fn b() {}", "new_string": "fn c() {}"}),
        &ctx,
    )
    .await;
    assert!(
        ambiguous["error"]
            .as_str()
            .unwrap()
            .contains("occurs 2 times"),
        "{ambiguous}"
    );
    let missing = call(
        &rt,
        "patch",
        json!({"path": "m.rs", "old_string": "nothing like it", "new_string": ""}),
        &ctx,
    )
    .await;
    assert!(missing["error"].as_str().unwrap().contains("not found"));
    let text = std::fs::read_to_string(ctx.workspace.join("m.rs")).unwrap();
    assert_eq!(
        text,
        "fn alpha() {\n    let x = 2;\n}\nfn b() {}\nfn b() {}\n"
    );
}

#[tokio::test]
async fn search_content_and_names_respecting_gitignore() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let ws = &ctx.workspace;
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("target")).unwrap();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() {\n    todo!(\"TODO: wire it\");\n}\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/lib.rs"), "// Todo: later\n").unwrap();
    std::fs::write(ws.join("target/gen.rs"), "// TODO: generated\n").unwrap();

    let hits = call(&rt, "search_files", json!({"pattern": "TODO"}), &ctx).await;
    assert_eq!(hits["count"], 1, "{hits}");
    assert_eq!(hits["matches"][0]["path"], "src/main.rs");
    assert_eq!(hits["matches"][0]["line"], 2);

    let ci = call(
        &rt,
        "search_files",
        json!({"pattern": "todo", "case_insensitive": true, "glob": "*.rs"}),
        &ctx,
    )
    .await;
    assert_eq!(ci["count"], 2, "{ci}");

    let names = call(
        &rt,
        "search_files",
        json!({"pattern": "*.rs", "target": "files"}),
        &ctx,
    )
    .await;
    let mut found: Vec<&str> = names["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    found.sort();
    assert_eq!(found, ["src/lib.rs", "src/main.rs"]);

    let limited = call(
        &rt,
        "search_files",
        json!({"pattern": ".", "max_results": 1}),
        &ctx,
    )
    .await;
    assert_eq!(limited["truncated"], true);
    let bad = call(&rt, "search_files", json!({"pattern": "("}), &ctx).await;
    assert!(bad["error"].as_str().unwrap().contains("bad regex"));
}

#[tokio::test]
async fn every_file_tool_stays_inside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "secret").unwrap();
    std::os::unix::fs::symlink(dir.path(), ctx.workspace.join("escape")).unwrap();
    std::os::unix::fs::symlink(&outside, ctx.workspace.join("link.txt")).unwrap();
    let attempts = [
        "../outside.txt".to_string(),
        outside.display().to_string(),
        "escape/outside.txt".to_string(),
        "link.txt".to_string(),
        "/etc/passwd".to_string(),
        "a\u{0}b".to_string(),
        "nope/../../outside.txt".to_string(),
    ];
    for path in &attempts {
        for (tool, args) in [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "pwned"})),
            (
                "patch",
                json!({"path": path, "old_string": "secret", "new_string": "pwned"}),
            ),
            ("search_files", json!({"pattern": "secret", "path": path})),
        ] {
            let out = call(&rt, tool, args, &ctx).await;
            let err = out["error"]
                .as_str()
                .unwrap_or_else(|| panic!("{tool} {path:?} succeeded: {out}"));
            assert!(
                err.contains("outside the session workspace") || err.contains("NUL"),
                "{tool} {path:?}: {err}"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
}

/// A `.gitignore` is read as the agent's other files are: one that is a
/// link out of the workspace (to `/dev/zero`, which filled the daemon's
/// memory) or a FIFO (which held a thread for good) is not read, a search
/// of a subdirectory obeys the workspace's, a `!` rule lets a file back
/// in, and none outside the workspace counts.
#[tokio::test]
async fn search_reads_no_gitignore_outside_the_workspace_or_that_is_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let ws = &ctx.workspace;
    std::fs::write(dir.path().join(".gitignore"), "*.rs\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "gen/\n*.log\n!keep.log\n").unwrap();
    for sub in ["zero", "pipe", "src/gen"] {
        std::fs::create_dir_all(ws.join(sub)).unwrap();
    }
    std::os::unix::fs::symlink("/dev/zero", ws.join("zero/.gitignore")).unwrap();
    nix::unistd::mkfifo(
        &ws.join("pipe/.gitignore"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    for (file, text) in [
        ("zero/a.rs", "MARK zero\n"),
        ("pipe/b.rs", "MARK pipe\n"),
        ("src/c.rs", "MARK src\n"),
        ("src/gen/d.rs", "MARK gen\n"),
        ("src/e.log", "MARK log\n"),
        ("src/keep.log", "MARK keep\n"),
    ] {
        std::fs::write(ws.join(file), text).unwrap();
    }
    let search = |args| {
        let (rt, ctx) = (&rt, &ctx);
        async move {
            let found = tokio::time::timeout(
                std::time::Duration::from_secs(30),
                call(rt, "search_files", args, ctx),
            )
            .await
            .expect("the search returns");
            let mut paths: Vec<String> = found["matches"]
                .as_array()
                .unwrap_or_else(|| panic!("{found}"))
                .iter()
                .map(|m| m["path"].as_str().unwrap().to_string())
                .collect();
            paths.sort();
            paths
        }
    };
    assert_eq!(
        search(json!({"pattern": "MARK"})).await,
        ["pipe/b.rs", "src/c.rs", "src/keep.log", "zero/a.rs"]
    );
    assert_eq!(
        search(json!({"pattern": "MARK", "path": "src"})).await,
        ["src/c.rs", "src/keep.log"]
    );
}
