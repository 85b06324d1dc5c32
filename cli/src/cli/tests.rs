use super::*;
use clap::CommandFactory;

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
    assert!(parse_duration("soon").is_err());
    assert!(parse_duration("5").is_err());
}

#[test]
fn quorums_parse() {
    assert_eq!(parse_quorum("majority"), Ok(Quorum::Majority));
    assert_eq!(parse_quorum("all"), Ok(Quorum::All));
    assert_eq!(parse_quorum("3"), Ok(Quorum::AtLeast(3)));
    assert!(parse_quorum("most").is_err());
}

#[test]
fn layouts_parse() {
    assert_eq!(parse_layout("quorumlock"), Ok(Layout::Quorumlock));
    assert_eq!(parse_layout("redisson"), Ok(Layout::Redisson));
    assert!(parse_layout("Redisson2").is_err());
    let cli = Cli::try_parse_from(["quorumlock", "status", "--layout", "redisson", "x"])
        .expect("valid command line");
    assert_eq!(cli.global.layout, Layout::Redisson);
}

#[test]
fn exec_takes_the_command_after_the_name() {
    let cli = Cli::try_parse_from([
        "quorumlock",
        "--nodes",
        "redis://a:1,redis://b:2",
        "exec",
        "--wait",
        "1s",
        "--fair",
        "job",
        "--",
        "sh",
        "-c",
        "exit 3",
    ])
    .expect("valid command line");
    assert_eq!(cli.global.nodes, ["redis://a:1", "redis://b:2"]);
    let Command::Exec(args) = cli.command else {
        unreachable!("parsed as exec");
    };
    assert_eq!(args.run.wait, Some(Duration::from_secs(1)));
    assert!(args.fair);
    assert_eq!(args.name, "job");
    assert_eq!(args.run.command, ["sh", "-c", "exit 3"]);
}

#[test]
fn elect_takes_a_value_and_the_command_after_the_name() {
    let cli = Cli::try_parse_from([
        "quorumlock",
        "elect",
        "--value",
        "host-a:8080",
        "--lease",
        "2s",
        "scheduler",
        "--",
        "./schedule",
        "--all",
    ])
    .expect("valid command line");
    let Command::Elect(args) = cli.command else {
        unreachable!("parsed as elect");
    };
    assert_eq!(args.value, "host-a:8080");
    assert_eq!(args.name, "scheduler");
    assert_eq!(args.run.lease, Some(Duration::from_secs(2)));
    assert_eq!(args.run.wait, None);
    assert_eq!(args.run.command, ["./schedule", "--all"]);
    assert!(parse_value("").is_err());
    assert!(parse_value(&"x".repeat(quorumlock::MAX_LEADER_VALUE + 1)).is_err());
    let no_value = Cli::try_parse_from(["quorumlock", "elect", "scheduler", "--", "true"]);
    assert!(no_value.is_err(), "--value is required");
}
