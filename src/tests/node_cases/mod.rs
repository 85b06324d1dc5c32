//! One table of node-level cases, run through [`NodeOps`] against the
//! in-memory [`FakeNode`] and against a real node ([`RedisNode`] running the
//! Lua scripts on a `redis-server` started for the test). Every step's answer
//! must be the expected one on both, so the fake cannot drift from the
//! scripts unnoticed.
//!
//! Every case runs in both key layouts (`Layout::Quorumlock` and
//! `Layout::Redisson`): the same answers in each.
//!
//! Both run on real time (the fake's clock is `tokio::time::Instant`, not
//! paused here). Remaining times are compared within `steps::SLACK`.

use std::sync::Arc;
use std::time::Duration;

use crate::layout::Layout;
use crate::node::{Member, NodeOps, NodeSpec, RedisNode};
use crate::tests::fake::FakeNode;

#[path = "../../../tests/support/local.rs"]
mod local;
mod locks;
mod queues;
mod side;
mod steps;
mod table;

use self::side::{Ctl, Side};
use self::steps::{same, Op, Out};
use self::table::Case;

/// Every case: the locks' cases, then the queue's.
fn cases() -> Vec<Case> {
    let mut cases = locks::cases();
    cases.extend(queues::cases());
    cases
}

/// Runs every case on a fresh fake and on the flushed server; returns a
/// report of each case where an answer differs from the expected one.
async fn run_all(
    server: &Arc<local::LocalNodes>,
    real: &Arc<dyn NodeOps>,
    layout: Layout,
) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases() {
        let fake = FakeNode::new(0);
        let sides = [
            Side {
                node: Arc::clone(&fake) as Arc<dyn NodeOps>,
                ctl: Ctl::Fake(fake),
                layout,
            },
            Side {
                node: Arc::clone(real),
                ctl: Ctl::Real(Arc::clone(server)),
                layout,
            },
        ];
        Side::admin_cmd(server, &mut redis::cmd("FLUSHALL")).await;
        let mut answers: [Vec<Out>; 2] = [Vec::new(), Vec::new()];
        for (side, answers) in sides.iter().zip(&mut answers) {
            for (op, _) in &case.steps {
                answers.push(side.run(op).await);
            }
        }
        let mut report = String::new();
        for (i, ((op, expect), (fake, real))) in case
            .steps
            .iter()
            .zip(answers[0].iter().zip(&answers[1]))
            .enumerate()
        {
            let mark = if same(expect, fake) && same(expect, real) && same(fake, real) {
                "  "
            } else {
                "!!"
            };
            report.push_str(&format!(
                "\n  {mark} step {i}: {op:?}\n       expected {expect}\n       fake     {fake}\n       real     {real}"
            ));
        }
        if report.contains("!!") {
            failures.push(format!("case {:?} in {layout:?}:{report}", case.name));
        }
    }
    failures
}

#[tokio::test]
async fn node_cases_fake_and_scripts_agree() {
    let server = local::LocalNodes::start_with(
        1,
        local::Extra {
            args: vec!["--enable-debug-command".to_owned(), "yes".to_owned()],
            tls: false,
        },
    )
    .expect("start a local redis-server (scripts/setup.sh installs it)");
    let server = Arc::new(server);
    let spec = NodeSpec::from_url(&server.url(0)).expect("node url");
    let real: Arc<dyn NodeOps> = Arc::new(Member::new(
        RedisNode::connect(0, spec, Duration::from_secs(5))
            .await
            .expect("connect to the local redis-server"),
    ));
    let mut failures = Vec::new();
    for layout in [Layout::Quorumlock, Layout::Redisson] {
        failures.extend(run_all(&server, &real, layout).await);
    }
    assert!(
        failures.is_empty(),
        "{} case(s) where the fake, the scripts or the expectation differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn node_cases_names_are_unique_and_steps_answer() {
    let cases = cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    for case in &cases {
        assert!(!case.steps.is_empty(), "{}: no step", case.name);
        for (op, expect) in &case.steps {
            let action = matches!(
                op,
                Op::Sleep(_)
                    | Op::Restart { .. }
                    | Op::ForeignLock(_)
                    | Op::ForeignQueue(_)
                    | Op::ForeignFence
            );
            assert_eq!(
                action,
                *expect == Out::Done,
                "{}: {op:?} is an action exactly when it expects no answer",
                case.name
            );
        }
    }
}
