//! Hostlist and tasks-per-node details.

use super::*;

#[test]
fn hostlist_padding_order_and_duplicates() {
    assert_eq!(hosts("b04-[09-10]"), strings(&["b04-09", "b04-10"]));
    assert_eq!(hosts("n[8-11]"), strings(&["n8", "n9", "n10", "n11"]));
    assert_eq!(hosts("n[1-3,2-4]"), strings(&["n1", "n2", "n3", "n2", "n3", "n4"]));
    assert_eq!(hosts("a,a,b"), strings(&["a", "a", "b"]));
    assert_eq!(hosts("n[5-3]"), Vec::<String>::new());
    assert_eq!(hosts("[1-2]"), strings(&["1", "2"]));
    assert_eq!(hosts(""), Vec::<String>::new());
    assert_eq!(hosts("a,"), strings(&["a"]));
    // Python int() rules, padded to the start as written.
    assert_eq!(hosts("n[ 1]"), strings(&["n01"]));
    assert_eq!(hosts("n[+1-2]"), strings(&["n01", "n02"]));
    assert_eq!(hosts("n[1_0]"), strings(&["n010"]));
    // Python's `$` matches before a final newline.
    assert_eq!(hosts("n[1-2]\n"), strings(&["n1", "n2"]));
    assert_eq!(hosts("n1\n"), strings(&["n1\n"]));
}

#[test]
fn hostlist_errors() {
    let detail = |s: &str| expand_hostlist(s).unwrap_err().detail().to_owned();
    assert_eq!(detail("a[1]b"), "Invalid hostlist format \"a[1]b\": Invalid part: a[1]b");
    assert_eq!(detail("n[]"), "Invalid hostlist format \"n[]\": Invalid part: n[]");
    assert_eq!(detail("a]b"), "Invalid hostlist format \"a]b\": Invalid part: a]b");
    assert_eq!(detail("n[1,2"), "Invalid hostlist format \"n[1,2\": Invalid part: n[1,2");
    assert_eq!(detail("n[[1]]"), "Invalid hostlist format \"n[[1]]\": ");
    assert_eq!(detail(",a"), "Invalid hostlist format \",a\": ");
    assert_eq!(detail("a,,b"), "Invalid hostlist format \"a,,b\": ");
    assert_eq!(detail("n[1-2-3]"), "Invalid hostlist format \"n[1-2-3]\": ");
    assert_eq!(
        detail("n[1,]"),
        "Invalid hostlist format \"n[1,]\": invalid literal for int() with base 10: ''"
    );
    assert_eq!(
        detail("n[x]"),
        "Invalid hostlist format \"n[x]\": invalid literal for int() with base 10: 'x'"
    );
    // Errors come in order: the bad range of an earlier part wins over a later empty part.
    assert_eq!(
        detail("n[y],,b"),
        "Invalid hostlist format \"n[y],,b\": invalid literal for int() with base 10: 'y'"
    );
}

#[test]
fn huge_hostlists_are_refused_not_allocated() {
    for list in ["n[0-999999999]", "n[0-999999],m1", "n[0-9223372036854775807]"] {
        let err = expand_hostlist(list).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert_eq!(err.tf_exception(), None, "{list}");
        assert!(err.detail().contains("more than 100000 entries"), "{}", err.detail());
    }
    let err = expand_hostlist("n[99999999999999999999]").unwrap_err();
    assert_eq!(err.tf_exception(), None);
    assert!(err.detail().contains("too large"), "{}", err.detail());
    // Long names: the byte budget.
    let long = format!("{}[0-99999]", "h".repeat(1000));
    let err = expand_hostlist(&long).unwrap_err();
    assert!(err.detail().contains("bytes"), "{}", err.detail());
    let wide = format!("n[{}1-99999]", " ".repeat(1000));
    assert!(expand_hostlist(&wide).unwrap_err().detail().contains("bytes"));
    // Exactly at the limit is fine.
    assert_eq!(expand_hostlist("n[1-100000]").unwrap().len(), DEFAULT_MAX_TASKS);
    let e = expand_hostlist("n[0000000-0999999]").unwrap_err().detail().to_owned();
    assert!(e.contains("more than 100000 entries") && e.contains("--max-resolve-tasks"), "{e}");
    assert_eq!(expand_hostlist_within("n[1-1000000]", 1_000_000).unwrap().len(), 1_000_000);
    assert!(expand_hostlist_within("n[1-11]", 10).is_err());
}

#[test]
fn tasks_per_node_details() {
    assert_eq!(expand_tasks_per_node("3(x0),2").unwrap(), [2]);
    assert_eq!(expand_tasks_per_node("02(x02)").unwrap(), [2, 2]);
    assert_eq!(expand_tasks_per_node("2\n,1(x2)\n").unwrap(), [2, 1, 1]);
    for bad in ["", "1,", ",1", "1(x)", "1(2)", "(x2)", "1(x2", "1(x2))", "-1", "1 ", "1(x-1)"] {
        let err = expand_tasks_per_node(bad).unwrap_err();
        assert_eq!(err.detail(), format!("Invalid tasks-per-node list format \"{bad}\": "));
        assert_eq!(err.tf_exception(), Some(TfException::ValueError));
    }
    for huge in ["4294967296", "1(x1000001)", "1(x99999999999999999999999)", "1(x999999),1,1"] {
        let err = expand_tasks_per_node(huge).unwrap_err();
        assert_eq!(err.tf_exception(), None, "{huge}");
        assert_eq!(err.code(), "INVALID_ARGUMENT");
    }
    assert_eq!(expand_tasks_per_node("1(x100000)").unwrap().len(), DEFAULT_MAX_TASKS);
    let e = expand_tasks_per_node("1(x1000000)").unwrap_err().detail().to_owned();
    assert!(e.contains("more than 100000 entries") && e.contains("--max-resolve-tasks"), "{e}");
    assert_eq!(expand_tasks_per_node_within("1(x3),2", 4).unwrap(), [1, 1, 1, 2]);
    assert!(expand_tasks_per_node_within("1(x3),2", 3).is_err());
}
