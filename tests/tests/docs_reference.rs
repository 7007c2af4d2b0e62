//! `docs/reference.md`'s flag tables agree with the binary: every flag `shardwise COMMAND
//! --help` prints is a row of that command's table, with the same environment variable and
//! default, and the table has no flag the command does not take.

use std::collections::BTreeMap;

use shardwise_tests::{repo_root, run_shardwise};

/// One flag as `--help` prints it or as the table shows it: its env var and default.
#[derive(Debug, PartialEq)]
struct Flag {
    env: Option<String>,
    default: Option<String>,
}

/// The flags of `shardwise ARGS --help`, without `--help` and `--version`.
fn help_flags(args: &[&str]) -> BTreeMap<String, Flag> {
    let mut all = args.to_vec();
    all.push("--help");
    let run = run_shardwise(&all, "", &[]);
    assert_eq!(run.code, 0, "shardwise {args:?} --help: {}", run.stderr);
    let options = run.stdout.split("Options:\n").nth(1).expect("an Options section");
    // Each option's text: from its `--flag` line to the next option's.
    let mut texts: Vec<(String, String)> = Vec::new();
    for line in options.lines() {
        let trimmed = line.trim_start();
        let flag_line =
            trimmed.strip_prefix("-h, ").or(trimmed.strip_prefix("-V, ")).or(Some(trimmed));
        match flag_line.filter(|l| l.starts_with("--") && line.len() - trimmed.len() <= 6) {
            Some(l) => {
                let name = l.split_whitespace().next().unwrap_or_default().to_owned();
                texts.push((name, l.to_owned()));
            }
            None => {
                if let Some((_, text)) = texts.last_mut() {
                    text.push(' ');
                    text.push_str(trimmed);
                }
            }
        }
    }
    let between = |text: &str, open: &str, close: char| {
        text.split(open).nth(1).and_then(|rest| rest.split(close).next()).map(str::to_owned)
    };
    texts
        .into_iter()
        .filter(|(name, _)| name != "--help" && name != "--version")
        .map(|(name, text)| {
            let flag = Flag {
                env: between(&text, "[env: ", '='),
                default: between(&text, "[default: ", ']'),
            };
            (name, flag)
        })
        .collect()
}

/// The rows of the reference's table for `shardwise NAME`.
fn table_flags(reference: &str, name: &str) -> BTreeMap<String, Flag> {
    let heading = format!("\n## `shardwise {name}`\n");
    let section = reference
        .split(&heading)
        .nth(1)
        .unwrap_or_else(|| panic!("docs/reference.md has a {heading:?} section"));
    let section = section.split("\n## ").next().unwrap_or_default();
    let cell = |c: &str| {
        let c = c.trim();
        c.strip_prefix('`').and_then(|c| c.split('`').next()).map(str::to_owned)
    };
    section
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            assert!(cells.len() >= 4, "a row of four cells: {row}");
            let flag = cell(cells[0].trim_start_matches('|')).expect("a flag");
            let name = flag.split_whitespace().next().unwrap_or_default().to_owned();
            (name, Flag { env: cell(cells[1]), default: cell(cells[2]) })
        })
        .collect()
}

#[test]
fn every_flag_of_every_command_is_in_the_reference_with_its_env_var_and_default() {
    let reference = std::fs::read_to_string(repo_root().join("docs/reference.md"))
        .expect("read docs/reference.md");
    for (args, name) in [
        (&["dispatcher"][..], "dispatcher"),
        (&["worker"][..], "worker"),
        (&["resolve"][..], "resolve"),
        (&["journal", "dump"][..], "journal dump"),
    ] {
        let help = help_flags(args);
        assert!(help.len() >= 2, "shardwise {name} --help lists its flags: {help:?}");
        let table = table_flags(&reference, name);
        assert_eq!(
            table.keys().collect::<Vec<_>>(),
            help.keys().collect::<Vec<_>>(),
            "docs/reference.md's table of `shardwise {name}` lists exactly its flags"
        );
        for (flag, want) in &help {
            assert_eq!(&table[flag], want, "`shardwise {name} {flag}`: env var and default");
        }
    }
}
