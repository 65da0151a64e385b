//! The command line's help and usage: every command's `--help` (examples, exit codes,
//! global options apart from each command's own), and arguments clap refuses.

use crate::common::cli::{WINDOWS_EXE, World};

/// The binary under test is the one the run names: this build's, or with
/// `SESSION_STATE_CLI_WINDOWS_EXE` the Windows `.exe` under Wine, whose usage line names
/// the program as Windows started it.
#[test]
fn the_binary_under_test_is_the_one_the_run_names() {
    let out = World::new().run(&["--help"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let usage = if std::env::var_os(WINDOWS_EXE).is_some() {
        "Usage: session-state.exe [OPTIONS] <COMMAND>"
    } else {
        "Usage: session-state [OPTIONS] <COMMAND>"
    };
    assert!(out.stdout.lines().any(|l| l == usage), "{}", out.stdout);
}

#[test]
fn help_lists_every_command_with_examples() {
    let w = World::new();
    let out = w.run(&["--help"]);
    assert_eq!(out.code, 0);
    insta::assert_snapshot!("help", out.stdout);
    for sub in [
        "read",
        "write",
        "patch",
        "drop",
        "history",
        "replay",
        "tree",
        "status",
        "force-refresh",
        "verify",
        "list",
        "import",
        "export",
    ] {
        let out = w.run(&[sub, "--help"]);
        assert_eq!(out.code, 0, "{sub}");
        assert!(
            out.stdout.contains("Examples:\n  session-state ")
                || out.stdout.contains("Examples:\n  SESSION_STATE_STORE="),
            "{sub}: {}",
            out.stdout
        );
        assert!(out.stdout.contains("Exit codes:"), "{sub}");
        // The help cites the project's own docs only, never a section of another text.
        assert!(!out.stdout.contains('§'), "{sub}: {}", out.stdout);
        // Every example is one command line: none is cut by a line break.
        let examples = out.stdout.split("Examples:\n").nth(1).unwrap();
        for line in examples.lines().take_while(|l| !l.is_empty()) {
            assert!(
                line.contains("session-state ") || line.starts_with("      ("),
                "{sub}: {line:?}"
            );
            assert!(!line.ends_with('\\'), "{sub}: {line:?}");
        }
    }
    assert!(!out.stdout.contains('§'), "{}", out.stdout);
    // The positional is named the same in the usage line and in the text.
    let replay = w.run(&["replay", "--help"]).stdout;
    assert!(
        replay.contains("Usage: session-state replay [OPTIONS] <SESSION|DIR>"),
        "{replay}"
    );
    assert!(!replay.contains("FILE"), "{replay}");
    let import = w.run(&["import", "--help"]).stdout;
    assert!(
        import.contains("Usage: session-state import [OPTIONS] <FILE>"),
        "{import}"
    );
    assert!(!import.contains("<FILE> is a session id"), "{import}");
    for example in import
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains("session-state import"))
    {
        assert!(
            example.contains("--store") || example.contains("SESSION_STATE_STORE="),
            "every import example names a store: {example}"
        );
    }
}

/// Every command, as its help names it.
const COMMANDS: [&str; 14] = [
    "read",
    "write",
    "patch",
    "drop",
    "history",
    "replay",
    "tree",
    "status",
    "force-refresh",
    "verify",
    "list",
    "import",
    "export",
    "prune",
];

/// The lines of a help's section under `heading` (up to the next heading), with its
/// whitespace folded to single spaces.
fn help_section(help: &str, heading: &str) -> String {
    let mut lines = help.lines().skip_while(|l| *l != heading);
    assert_eq!(lines.next(), Some(heading), "{heading}: {help}");
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect();
    folded(&body.join("\n"))
}

/// A help text with its line breaks and runs of spaces folded to single spaces.
fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `--store`'s text in a command's help: its entry under "Global options".
fn store_text(help: &str) -> String {
    let global = help_section(help, "Global options:");
    let start = global
        .find("--store <URL>")
        .expect("--store is a global option");
    global[start..].to_owned()
}

#[test]
fn global_options_stand_apart_from_each_commands_own() {
    let w = World::new();
    let top = w.run(&["--help"]).stdout;
    let global = help_section(&top, "Global options:");
    assert!(
        global.contains("--verbose") && global.contains("--store"),
        "{top}"
    );
    assert!(!help_section(&top, "Options:").contains("--store"), "{top}");
    for sub in COMMANDS {
        for flag in ["-h", "--help"] {
            let help = w.run(&[sub, flag]).stdout;
            let global = help_section(&help, "Global options:");
            let own = help_section(&help, "Options:");
            assert!(
                global.contains("--verbose") && global.contains("--store"),
                "{sub}: {help}"
            );
            assert!(
                !own.contains("--verbose") && !own.contains("--store"),
                "{sub}: {help}"
            );
            // The command's own options are under its own heading only.
            for option in [
                "--plugin",
                "--scope",
                "--at",
                "--db",
                "--json",
                "--dry-run",
                "--output",
            ] {
                assert!(!global.contains(option), "{sub}: {option} in {global}");
            }
        }
    }
}

#[test]
fn store_help_says_what_store_means_for_each_command() {
    let w = World::new();
    for sub in COMMANDS {
        let help = w.run(&[sub, "--help"]).stdout;
        let store = store_text(&help);
        let usage = help.lines().find(|l| l.starts_with("Usage: ")).unwrap();
        let takes_a_session = usage.contains("<SESSION");
        // <SESSION> only where the command has one.
        assert_eq!(
            store.contains("<SESSION"),
            takes_a_session,
            "{sub}: {store}"
        );
        // `none` (session files) only where a command works on files without a store.
        let works_on_files = !matches!(sub, "import" | "export" | "prune");
        assert_eq!(store.contains("`none`"), works_on_files, "{sub}: {store}");
    }
    let prune = store_text(&w.run(&["prune", "--help"]).stdout);
    assert!(prune.contains("Not used by prune"), "{prune}");
    let import = store_text(&w.run(&["import", "--help"]).stdout);
    assert!(import.contains("required"), "{import}");
}

#[test]
fn scope_help_says_what_each_scope_is() {
    let w = World::new();
    for sub in ["read", "write", "patch", "drop"] {
        for flag in ["-h", "--help"] {
            let help = folded(&w.run(&[sub, flag]).stdout);
            assert!(!help.contains("Which fold"), "{sub}: {help}");
            assert!(!help.contains("Folded"), "{sub}: {help}");
            assert!(help.contains("along the current branch"), "{sub}: {help}");
            assert!(help.contains("forks inherit it"), "{sub}: {help}");
            assert!(help.contains("siblings are isolated"), "{sub}: {help}");
            assert!(
                help.contains("over the whole file in append order"),
                "{sub}: {help}"
            );
        }
    }
}

#[test]
fn top_level_exit_codes_name_every_commands_exit_1() {
    let w = World::new();
    let help = folded(&w.run(&["--help"]).stdout);
    let codes = &help[help.find("Exit codes:").unwrap()..];
    let codes = &codes[..codes.find("2 error").unwrap()];
    // Every command whose own help has an exit 1.
    for sub in COMMANDS {
        let own = folded(&w.run(&[sub, "--help"]).stdout);
        let own_codes = &own[own.find("Exit codes:").unwrap()..];
        if own_codes.contains("; 1 ") {
            assert!(codes.contains(&format!("{sub}: ")), "{sub}: {codes}");
        }
    }
    assert!(
        codes.contains("prune: not confirmed, nothing removed"),
        "{codes}"
    );
}

#[test]
fn help_points_to_what_an_installed_binary_has() {
    let w = World::new();
    let top = w.run(&["--help"]).stdout;
    assert!(
        folded(&top).contains("session-state <command> --help"),
        "{top}"
    );
    for args in std::iter::once(vec!["--help"])
        .chain(COMMANDS.iter().map(|sub| vec![*sub, "--help"]))
        .chain(COMMANDS.iter().map(|sub| vec!["help", *sub]))
    {
        let help = w.run(&args).stdout;
        // No repository path: an installed binary's user has no docs/ folder.
        assert!(!help.contains("docs/"), "{args:?}: {help}");
        assert!(!help.contains(".md"), "{args:?}: {help}");
    }
}

/// `write --help` says the command line does not know an extension's `validate`, and how to
/// check a value first.
#[test]
fn write_help_says_the_cli_does_not_know_an_extensions_validate() {
    let w = World::new();
    let help = w.run(&["write", "--help"]).stdout;
    assert!(
        help.contains("The command line does not know an extension's `validate`")
            && help.contains("StateValidationError")
            && help.contains("Check a value first with the extension")
            && help.contains("@session-state/pi/testing"),
        "{help}"
    );
}

#[test]
fn bad_arguments_exit_2() {
    let w = World::example();
    let out = w.run(&["read", "s.jsonl"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--plugin"), "{}", out.stderr);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--scope", "tree"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("branch") && out.stderr.contains("session"));
}
