//! Per-repository review settings: the `[review]` table of
//! `.switchboard.toml` at the repository's root, read from the change's
//! **base** commit, never its head, so a change cannot set how it is
//! reviewed. The route's configuration stays the operator's ceiling: a
//! repository can narrow a review (ignore paths, fewer comments, a quieter
//! profile) and guide it (instructions per path), never widen what the
//! route allows.

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use super::findings::{Finding, Severity};
use super::scope::ChangeInfo;

/// The file, at the repository's root.
pub const FILE: &str = ".switchboard.toml";

/// The largest settings file read, and the most globs it may name.
const MAX_FILE_BYTES: usize = 64 * 1024;
const MAX_GLOBS: usize = 200;

/// Characters of one path's instructions kept, and of them all.
const INSTRUCTION_CHARS: usize = 2000;
const INSTRUCTIONS_CHARS: usize = 8000;

/// Which findings a review posts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Only blocking findings.
    Quiet,
    /// Every finding (the default).
    #[default]
    Thorough,
}

/// Instructions for the files under one glob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathInstructions {
    /// Glob of the paths they apply to (`src/db/**`).
    pub path: String,
    /// What to look for there.
    pub text: String,
}

/// The `[review]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Globs of paths never shown to the model, by any tool, nor commented
    /// on (`vendor/**`, `*.lock`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
    /// Instructions per path glob, given with the diff.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<PathInstructions>,
    /// `quiet` posts only blocking findings; `thorough` all of them.
    pub profile: Profile,
    /// Line comments per review at most (the route's limit stays the
    /// ceiling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_comments: Option<usize>,
    /// Whether draft changes are reviewed automatically (not by default:
    /// a change is reviewed when it is marked ready).
    pub drafts: bool,
    /// Whether changes opened by bots are reviewed automatically.
    pub bots: bool,
    /// Globs of the target branches whose changes are reviewed
    /// automatically (none: every branch).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<String>,
    /// Whether a change gets a description when it is opened.
    pub describe: bool,
    /// Globs of the CI job names whose failures are triaged (none: every
    /// job).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub triage_jobs: Vec<String>,
    /// Whether lock files, vendored and generated code are left out of
    /// the combined diff (listed, readable by path, not required).
    pub skip_generated: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            ignore: Vec::new(),
            instructions: Vec::new(),
            profile: Profile::default(),
            max_comments: None,
            drafts: false,
            bots: true,
            branches: Vec::new(),
            describe: false,
            triage_jobs: Vec::new(),
            skip_generated: true,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    review: Settings,
}

impl Settings {
    /// The settings `text` (the file's contents) holds, or what is wrong
    /// with it, in words for the change's authors.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_FILE_BYTES {
            return Err(format!("the file is larger than {MAX_FILE_BYTES} bytes"));
        }
        let file: File = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let settings = file.review;
        let globs: Vec<&String> = settings
            .ignore
            .iter()
            .chain(settings.instructions.iter().map(|i| &i.path))
            .chain(&settings.branches)
            .chain(&settings.triage_jobs)
            .collect();
        if globs.len() > MAX_GLOBS {
            return Err(format!(
                "ignore, instructions, branches and triage_jobs name more than {MAX_GLOBS} globs"
            ));
        }
        for glob in globs {
            Glob::new(glob).map_err(|e| format!("{glob:?} is not a glob: {e}"))?;
        }
        if settings.max_comments == Some(0) {
            return Err("max_comments must be 1 or more".into());
        }
        Ok(settings)
    }

    fn set(globs: impl IntoIterator<Item = impl AsRef<str>>) -> GlobSet {
        let mut set = GlobSetBuilder::new();
        for glob in globs {
            if let Ok(glob) = Glob::new(glob.as_ref()) {
                set.add(glob);
            }
        }
        set.build().unwrap_or_else(|_| GlobSet::empty())
    }

    /// What decides which paths are ignored, compiled once for many.
    pub fn ignored(&self) -> Ignored {
        Ignored((!self.ignore.is_empty()).then(|| Self::set(&self.ignore)))
    }

    /// The instructions for the paths in `paths`, as one text (empty:
    /// none apply).
    pub fn instructions_for<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> String {
        let paths: Vec<&str> = paths.into_iter().collect();
        let applying: Vec<String> = self
            .instructions
            .iter()
            .filter(|i| {
                let set = Self::set([&i.path]);
                paths.iter().any(|p| set.is_match(p))
            })
            .map(|i| {
                format!(
                    "- For `{}`: {}",
                    i.path.replace('`', "'"),
                    crate::render::clip(i.text.trim(), INSTRUCTION_CHARS)
                )
            })
            .collect();
        crate::render::clip(&applying.join("\n"), INSTRUCTIONS_CHARS)
    }

    /// Why a run that no one asked for is not made on a change described
    /// by `info` (`None`: it is made).
    pub fn passes(&self, info: &ChangeInfo) -> Option<String> {
        if info.draft && !self.drafts {
            return Some("the change is a draft and the settings do not review drafts".into());
        }
        if info.bot && !self.bots {
            return Some(format!(
                "the change was opened by a bot ({}) and the settings do not review bots' changes",
                super::scope::plain_path(&info.author)
            ));
        }
        if !self.branches.is_empty() && !Self::set(&self.branches).is_match(&info.target) {
            return Some(format!(
                "the change targets {}, not a branch the settings review",
                super::scope::plain_path(&info.target)
            ));
        }
        None
    }

    /// Whether a failure of the CI job `job` is triaged.
    pub fn triages(&self, job: &str) -> bool {
        self.triage_jobs.is_empty() || Self::set(&self.triage_jobs).is_match(job)
    }

    /// Line comments a review may post: the repository's limit within
    /// the route's.
    pub fn max_comments(&self, route: usize) -> usize {
        self.max_comments.map_or(route, |n| n.min(route))
    }

    /// Whether the profile posts `finding` (`ignored`: this settings'
    /// [`ignored`](Self::ignored)).
    pub fn posts(&self, ignored: &Ignored, finding: &Finding) -> bool {
        !ignored.ignores(&finding.path)
            && (self.profile == Profile::Thorough || finding.severity == Severity::Blocking)
    }
}

/// The ignored paths' globs, compiled.
#[derive(Debug, Clone)]
pub struct Ignored(Option<GlobSet>);

impl Ignored {
    /// Whether `path` is ignored, however it is spelled (`./a`, `a//b`).
    pub fn ignores(&self, path: &str) -> bool {
        self.0
            .as_ref()
            .is_some_and(|set| set.is_match(normal(path)))
    }
}

/// `path` without empty and `.` segments.
pub fn normal(path: &str) -> String {
    path.split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[review]
ignore = ["vendor/**", "*.lock"]
profile = "quiet"
max_comments = 5

[[review.instructions]]
path = "src/db/**"
text = "Check every query for injection."
"#;

    #[test]
    fn a_whole_file_reads_and_applies() {
        let s = Settings::parse(FULL).unwrap();
        let ignored = s.ignored();
        assert!(ignored.ignores("vendor/x/y.rs") && ignored.ignores("Cargo.lock"));
        assert!(ignored.ignores("./vendor/x.rs") && ignored.ignores("vendor//x.rs"));
        assert!(!ignored.ignores("src/lib.rs"));
        assert_eq!(s.max_comments(20), 5);
        assert_eq!(s.max_comments(3), 3, "the route's limit is the ceiling");
        assert!(
            s.instructions_for(["src/db/query.rs"])
                .contains("Check every query")
        );
        assert_eq!(s.instructions_for(["src/lib.rs"]), "");
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
    }

    #[test]
    fn automatic_runs_follow_drafts_bots_branches_and_jobs() {
        let s = Settings::parse(
            "[review]\ndrafts = false\nbots = false\nbranches = [\"main\", \"release/*\"]\ntriage_jobs = [\"test*\"]",
        )
        .unwrap();
        let info = |draft, bot, target: &str| ChangeInfo {
            draft,
            author: "someone".into(),
            bot,
            target: target.into(),
            author_id: None,
        };
        assert_eq!(s.passes(&info(false, false, "main")), None);
        assert_eq!(s.passes(&info(false, false, "release/2.0")), None);
        assert!(
            s.passes(&info(true, false, "main"))
                .unwrap()
                .contains("draft")
        );
        assert!(
            s.passes(&info(false, true, "main"))
                .unwrap()
                .contains("bot")
        );
        assert!(
            s.passes(&info(false, false, "dev"))
                .unwrap()
                .contains("dev")
        );
        assert!(s.triages("test (ubuntu)") && !s.triages("lint"));
        let all = Settings::default();
        assert_eq!(all.passes(&info(false, true, "anything")), None);
        assert!(
            all.passes(&info(true, false, "main")).is_some(),
            "no drafts by default"
        );
        assert!(all.triages("lint") && all.skip_generated && !all.describe);
    }

    #[test]
    fn mistakes_say_what_is_wrong() {
        for (text, said) in [
            ("[review]\nprofile = \"loud\"", "loud"),
            ("[review]\nignor = []", "ignor"),
            ("[review]\nignore = [\"a[\"]", "not a glob"),
            ("[review]\nmax_comments = 0", "1 or more"),
            ("[review", "table"),
            ("[deploy]\nx = 1", "deploy"),
            ("#".repeat(70_000).as_str(), "larger than"),
            (
                format!("[review]\nignore = [{}]", vec!["\"a\""; 201].join(",")).as_str(),
                "more than 200",
            ),
        ] {
            let err = Settings::parse(text).unwrap_err();
            assert!(err.contains(said), "{text:?}: {err}");
        }
    }
}
