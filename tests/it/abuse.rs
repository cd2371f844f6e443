//! Cheap abuse: detection that cannot be stalled (brace bombs, expansion
//! bombs, any input up to 64 KiB judged in bounded time, failing closed).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use switchboard::approvals::{Verdict, evaluate, evaluate_bounded};

/// The time limit for one judgement. Release builds take a fraction of it;
/// the suite runs unoptimised.
const LIMIT: Duration = Duration::from_millis(50);

#[tokio::test]
async fn a_26_group_brace_bomb_is_judged_at_once_and_not_waved_through() {
    switchboard::approvals::detect::warm_up();
    let bomb = format!("echo {}", "{,}".repeat(26));
    let started = Instant::now();
    let evaluation = evaluate_bounded(&bomb, &[], &[]).await;
    let took = started.elapsed();
    assert!(took < LIMIT, "took {took:?}");
    assert_eq!(evaluation.verdict, Verdict::NeedsApproval);
    assert!(
        evaluation.detection.keys().contains(&"expansion_budget"),
        "{:?}",
        evaluation.detection.keys()
    );
}

#[test]
fn variables_that_double_are_stopped_too() {
    switchboard::approvals::detect::warm_up();
    let mut line = String::from("a=xxxxxxxxxxxxxxxx");
    let mut previous = 'a';
    for name in 'b'..='z' {
        line.push_str(&format!("; {name}=${previous}${previous}"));
        previous = name;
    }
    line.push_str("; echo $z");
    let started = Instant::now();
    let evaluation = evaluate(&line, &[], &[]);
    assert!(started.elapsed() < LIMIT, "took {:?}", started.elapsed());
    assert_eq!(evaluation.verdict, Verdict::NeedsApproval);
}

#[test]
fn ordinary_brace_lists_still_expand_and_judge() {
    let evaluation = evaluate("{rm,-rf,build}", &[], &[]);
    assert!(
        evaluation.detection.keys().contains(&"recursive_delete"),
        "{:?}",
        evaluation.detection.keys()
    );
    assert!(!evaluation.detection.keys().contains(&"expansion_budget"));
}

/// Shell-ish text: the characters expansion and nesting are made of.
fn shellish(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "{", "}", ",", "$", "a", "=", ";", " ", "'", "\"", "`", "(", ")", "\\", "$(echo ",
            "{,}", "x=$x$x;", "sh -c '", "|", "&&", "\n", "rm -rf ", "${x:-", "<<<", "eval ",
        ]),
        0..max,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_input_up_to_64_kib_is_judged_in_bounded_time(
        text in shellish(12_000),
        pad in 0usize..4,
    ) {
        switchboard::approvals::detect::warm_up();
        let mut line = text;
        line.truncate(64 * 1024 - pad);
        while !line.is_char_boundary(line.len()) {
            line.pop();
        }
        let started = Instant::now();
        let _ = evaluate(&line, &[], &[]);
        let took = started.elapsed();
        prop_assert!(took < LIMIT, "{} bytes took {took:?}", line.len());
    }
}
