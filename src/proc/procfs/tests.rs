use super::*;

#[test]
fn stat_lines_with_odd_command_names_parse() {
    let s =
        "4242 (my (weird) prog) S 1 4242 4242 0 -1 4194560 0 0 0 0 5 3 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(
        parse_stat(s),
        Some(ProcStat {
            ppid: 1,
            pgrp: 4242,
            session: 4242,
            state: 'S',
            start_time: 987654,
        })
    );
    assert_eq!(parse_stat("garbage"), None);
}
