//! Tests of `cluster::selector`.
use super::*;
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.to_owned(),
        operator,
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    }
}

fn parse_err(text: &str) -> ClusterError {
    match LabelSelector::parse(text) {
        Ok(s) => panic!("{text:?} parsed as {s:?}"),
        Err(e) => e,
    }
}

#[test]
fn parses_valid_selectors() {
    use Operator::*;
    let cases: Vec<(&str, Vec<Requirement>, &str)> = vec![
        ("", vec![], ""),
        ("   ", vec![], ""),
        ("app", vec![req("app", Exists, &[])], "app"),
        ("!app", vec![req("app", DoesNotExist, &[])], "!app"),
        ("! app", vec![req("app", DoesNotExist, &[])], "!app"),
        ("app=web", vec![req("app", Equals, &["web"])], "app=web"),
        (" app = web ", vec![req("app", Equals, &["web"])], "app=web"),
        ("app==web", vec![req("app", DoubleEquals, &["web"])], "app==web"),
        ("app!=web", vec![req("app", NotEquals, &["web"])], "app!=web"),
        ("app=", vec![req("app", Equals, &[""])], "app="),
        ("a==", vec![req("a", DoubleEquals, &[""])], "a=="),
        ("app!=", vec![req("app", NotEquals, &[""])], "app!="),
        ("app=,tier", vec![req("app", Equals, &[""]), req("tier", Exists, &[])], "app=,tier"),
        ("tier in (b,a,b)", vec![req("tier", In, &["a", "b"])], "tier in (a,b)"),
        ("app in ( a , b )", vec![req("app", In, &["a", "b"])], "app in (a,b)"),
        ("app in(a)", vec![req("app", In, &["a"])], "app in (a)"),
        ("app notin (x)", vec![req("app", NotIn, &["x"])], "app notin (x)"),
        ("x>3", vec![req("x", GreaterThan, &["3"])], "x>3"),
        ("x < 10", vec![req("x", LessThan, &["10"])], "x<10"),
        ("in=x", vec![req("in", Equals, &["x"])], "in=x"),
        ("notin", vec![req("notin", Exists, &[])], "notin"),
        ("in in (in,notin)", vec![req("in", In, &["in", "notin"])], "in in (in,notin)"),
        (
            "example.com/role=ps",
            vec![req("example.com/role", Equals, &["ps"])],
            "example.com/role=ps",
        ),
        (
            "k8s.io/a-b_c.D=V.1-x_y",
            vec![req("k8s.io/a-b_c.D", Equals, &["V.1-x_y"])],
            "k8s.io/a-b_c.D=V.1-x_y",
        ),
        (
            "app=web,tier in (a,b),!legacy,env!=prod,x>3",
            vec![
                req("app", Equals, &["web"]),
                req("tier", In, &["a", "b"]),
                req("legacy", DoesNotExist, &[]),
                req("env", NotEquals, &["prod"]),
                req("x", GreaterThan, &["3"]),
            ],
            "app=web,tier in (a,b),!legacy,env!=prod,x>3",
        ),
        (
            "\tapp = web ,\n tier notin ( x ) , ! legacy ",
            vec![
                req("app", Equals, &["web"]),
                req("tier", NotIn, &["x"]),
                req("legacy", DoesNotExist, &[]),
            ],
            "app=web,tier notin (x),!legacy",
        ),
    ];
    for (text, requirements, display) in cases {
        let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(selector.requirements(), requirements.as_slice(), "{text:?}");
        assert_eq!(selector.as_str(), text);
        assert_eq!(selector.to_string(), display, "{text:?}");
        assert_eq!(selector.is_everything(), requirements.is_empty());
        let from_str: LabelSelector = text.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_str, selector);
        let reparsed = LabelSelector::parse(display).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reparsed.requirements(), selector.requirements());
    }
}

#[test]
fn accepts_limits() {
    let name63 = "a".repeat(63);
    let prefix253 = format!("{}.b", "a".repeat(251));
    let key = format!("{prefix253}/{name63}");
    let text = format!("{key}={name63}");
    let selector = LabelSelector::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(selector.requirements(), [req(&key, Operator::Equals, &[&name63])]);
    assert!(LabelSelector::parse("x>9223372036854775807").is_ok());
    assert!(LabelSelector::parse("x>0000000000000000000000000001").is_ok());
}

#[test]
fn matches_labels() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let cases: &[Case<'_>] = &[
        ("", &[], true),
        ("", &[("a", "b")], true),
        ("app", &[("app", "")], true),
        ("app", &[("other", "x")], false),
        ("!app", &[], true),
        ("!app", &[("app", "x")], false),
        ("app=web", &[("app", "web")], true),
        ("app=web", &[("app", "db")], false),
        ("app=web", &[], false),
        ("app==web", &[("app", "web")], true),
        ("app=", &[("app", "")], true),
        ("app=", &[], false),
        ("app!=web", &[], true),
        ("app!=web", &[("app", "db")], true),
        ("app!=web", &[("app", "web")], false),
        ("t in (a,b)", &[("t", "a")], true),
        ("t in (a,b)", &[("t", "c")], false),
        ("t in (a,b)", &[], false),
        ("t notin (a,b)", &[], true),
        ("t notin (a,b)", &[("t", "c")], true),
        ("t notin (a,b)", &[("t", "b")], false),
        ("x>3", &[("x", "4")], true),
        ("x>3", &[("x", "3")], false),
        ("x>3", &[("x", "abc")], false),
        ("x>3", &[], false),
        ("x>3", &[("x", "-4")], false),
        ("x<3", &[("x", "-4")], true),
        ("x<3", &[("x", "2")], true),
        ("x<3", &[("x", "3")], false),
        ("x<03", &[("x", "2")], true),
        ("app=web,!legacy", &[("app", "web")], true),
        ("app=web,!legacy", &[("app", "web"), ("legacy", "1")], false),
        ("app=web,tier in (a,b),env!=prod", &[("app", "web"), ("tier", "b")], true),
        (
            "app=web,tier in (a,b),env!=prod",
            &[("app", "web"), ("tier", "b"), ("env", "prod")],
            false,
        ),
    ];
    for (text, pairs, expected) in cases {
        let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(selector.matches(&labels(pairs)), *expected, "{text:?} vs {pairs:?}");
    }
}

#[test]
fn rejects_invalid_selectors() {
    let long_name = "a".repeat(64);
    let long_key = format!("{long_name}=x");
    let long_value = format!("a={long_name}");
    let long_prefix = format!("{}/a", "a".repeat(254));
    let cases: Vec<(&str, &str)> = vec![
        ("app in (", "expected a value or ')' but reached the end"),
        ("app in ()", "the set of values after 'in' is empty at column 9"),
        ("app notin ( )", "the set of values after 'notin' is empty at column 13"),
        ("=x", "expected a key or '!' but found '=' at column 1"),
        ("a=b=c", "expected ',' or the end after \"a=b\" but found '=' at column 4"),
        ("a b", "after key \"a\" but found \"b\" at column 3"),
        ("!", "expected a key after '!' but reached the end"),
        ("!!a", "expected a key after '!' but found '!' at column 2"),
        ("!a=b", "expected ',' or the end after \"!a\" but found '=' at column 3"),
        ("a,", "expected a key or '!' after ',' but reached the end"),
        (",a", "expected a key or '!' but found ',' at column 1"),
        ("a,,b", "expected a key or '!' after ',' but found ',' at column 3"),
        ("a in (x y)", "expected ',' or ')' but found \"y\" at column 9"),
        ("a in (x,)", "expected a value after ',' but found ')' at column 9"),
        ("a in (x", "expected ',' or ')' but reached the end"),
        ("a in x", "expected '(' after 'in' but found \"x\" at column 6"),
        ("a in", "expected '(' after 'in' but reached the end"),
        ("a notin", "expected '(' after 'notin' but reached the end"),
        ("a in (x),", "expected a key or '!' after ','"),
        (&long_key, "the name part must be no more than 63 characters (it has 64)"),
        (&long_value, "a value must be no more than 63 characters (it has 64)"),
        (&long_prefix, "the prefix must be no more than 253 characters (it has 254)"),
        ("a$=b", "invalid key \"a$\" at column 1: the name part must consist of"),
        ("a=b$", "invalid value \"b$\" at column 3: a value must consist of"),
        ("a in (b,-c)", "invalid value \"-c\" at column 9"),
        ("-a", "invalid key \"-a\" at column 1"),
        ("a-", "invalid key \"a-\" at column 1"),
        ("Example.com/a", "the prefix \"Example.com\" must be a DNS-1123 subdomain"),
        ("a..b/c", "the prefix \"a..b\" must be a DNS-1123 subdomain"),
        ("/a", "the prefix before '/' must not be empty"),
        ("a/", "the name part must not be empty"),
        ("a/b/c", "a key may contain at most one '/'"),
        ("x>abc", "the value \"abc\" after '>' at column 3 must be a non-negative integer"),
        ("x<-1", "the value \"-1\" after '<' at column 3 must be a non-negative integer"),
        ("x>99999999999999999999", "must be a non-negative integer that fits in 64 bits"),
        ("x>", "expected an integer after '>' but reached the end"),
        ("x>,y", "expected an integer after '>' but found ',' at column 3"),
        ("a=(", "expected a value, ',' or the end after '=' but found '(' at column 3"),
        ("a!==b", "expected a value, ',' or the end after '!=' but found '=' at column 4"),
        ("a(b)", "after key \"a\" but found '(' at column 2"),
        ("a >= 1", "expected an integer after '>' but found '=' at column 4"),
        ("ü=b", "invalid key \"ü\" at column 1"),
        ("a=bü", "invalid value \"bü\" at column 3"),
    ];
    for (text, fragment) in cases {
        let err = parse_err(text);
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert_eq!(err.tf_exception(), None);
        let prefix = format!("invalid label selector {text:?}: ");
        assert!(err.detail().starts_with(&prefix), "{text:?}: {}", err.detail());
        assert!(err.detail().contains(fragment), "{text:?}: {}", err.detail());
    }
    assert_eq!(
        parse_err("app in (").detail(),
        "invalid label selector \"app in (\": expected a value or ')' but reached the end"
    );
}

#[test]
fn requirement_display_and_match_tolerate_hand_built_values() {
    let weird = req("x", Operator::GreaterThan, &[]);
    assert_eq!(weird.to_string(), "x>");
    assert!(!weird.matches(&labels(&[("x", "1")])));
    let unsorted = req("t", Operator::In, &["b", "a"]);
    assert!(unsorted.matches(&labels(&[("t", "a")])));
    assert_eq!(Operator::Exists.as_str(), "");
}

// --- property tests -----------------------------------------------------------------------

const KEYS: &[&str] = &["app", "tier", "x", "in", "example.com/role", "k8s.io/a-b_c.d"];
const VALUES: &[&str] = &["", "a", "b", "web", "0", "3", "42", "007", "A.b-c_d", "notin"];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(KEYS).prop_map(str::to_owned),
        1 => "([a-z0-9]([a-z0-9-]{0,5}[a-z0-9])?\\.){0,2}[a-z]{1,4}/[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
        1 => "[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(VALUES).prop_map(str::to_owned),
        1 => "([A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?)?",
    ]
}

fn integer() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0i64..100).prop_map(|n| n.to_string()),
        1 => "[0-9]{1,18}",
    ]
}

fn requirement() -> impl Strategy<Value = Requirement> {
    let nonempty = value().prop_filter("set values are non-empty", |v| !v.is_empty());
    let set = proptest::collection::btree_set(nonempty, 1..4)
        .prop_map(|s| s.into_iter().collect::<Vec<_>>());
    prop_oneof![
        key().prop_map(|k| Requirement { key: k, operator: Operator::Exists, values: vec![] }),
        key().prop_map(|k| Requirement {
            key: k,
            operator: Operator::DoesNotExist,
            values: vec![]
        }),
        (
            key(),
            proptest::sample::select(vec![
                Operator::Equals,
                Operator::DoubleEquals,
                Operator::NotEquals
            ]),
            value()
        )
            .prop_map(|(key, operator, v)| Requirement { key, operator, values: vec![v] }),
        (key(), proptest::sample::select(vec![Operator::In, Operator::NotIn]), set)
            .prop_map(|(key, operator, values)| Requirement { key, operator, values }),
        (
            key(),
            proptest::sample::select(vec![Operator::GreaterThan, Operator::LessThan]),
            integer()
        )
            .prop_map(|(key, operator, v)| Requirement { key, operator, values: vec![v] }),
    ]
}

/// Writes `r` with optional whitespace between tokens (`spaces` says where).
fn spaced(r: &Requirement, spaces: &[bool]) -> String {
    let ws = |i: usize| {
        if spaces.get(i).copied().unwrap_or(false) { " " } else { "" }
    };
    let op = r.operator.as_str();
    match r.operator {
        Operator::Exists => format!("{}{}{}", ws(0), r.key, ws(1)),
        Operator::DoesNotExist => format!("{}!{}{}{}", ws(0), ws(1), r.key, ws(2)),
        Operator::In | Operator::NotIn => {
            let inner: Vec<String> = r
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{}{v}{}", ws(i + 4), ws(i + 5)))
                .collect();
            format!("{}{} {op} {}({}){}", ws(0), r.key, ws(1), inner.join(","), ws(2))
        }
        _ => {
            let v = r.values.join(",");
            format!("{}{}{}{op}{}{v}{}", ws(0), r.key, ws(1), ws(2), ws(3))
        }
    }
}

fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(key(), prop_oneof![value(), integer()], 0..6)
}

proptest! {
    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        let _ = LabelSelector::parse(&text);
    }

    #[test]
    fn selector_like_strings_never_panic(text in "[a-z0-9=!(),<> .\\-_/]{0,40}") {
        if let Ok(selector) = LabelSelector::parse(&text) {
            // Whatever parses displays to something that parses to the same requirements.
            let reparsed = LabelSelector::parse(&selector.to_string());
            prop_assert_eq!(reparsed.as_ref().map(|s| s.requirements()), Ok(selector.requirements()));
        }
    }

    #[test]
    fn mixed_unicode_strings_never_panic(text in "[a-zé\\u{1F600}=!(),<> \t\n.\\-_/]{0,40}") {
        let _ = LabelSelector::parse(&text);
    }

    #[test]
    fn valid_selectors_round_trip(
        requirements in proptest::collection::vec(requirement(), 0..5),
        spaces in proptest::collection::vec(any::<bool>(), 16),
        maps in proptest::collection::vec(label_map(), 1..6),
    ) {
        let text = requirements
            .iter()
            .map(|r| spaced(r, &spaces))
            .collect::<Vec<_>>()
            .join(",");
        let parsed = LabelSelector::parse(&text);
        prop_assert!(parsed.is_ok(), "{:?}: {:?}", text, parsed);
        let parsed = parsed.unwrap_or_else(|_| unreachable!());
        prop_assert_eq!(parsed.requirements(), requirements.as_slice());
        prop_assert_eq!(parsed.as_str(), text.as_str());

        let display = parsed.to_string();
        let reparsed = LabelSelector::parse(&display);
        prop_assert!(reparsed.is_ok(), "{:?}: {:?}", display, reparsed);
        let reparsed = reparsed.unwrap_or_else(|_| unreachable!());
        prop_assert_eq!(reparsed.requirements(), parsed.requirements());
        prop_assert_eq!(reparsed.to_string(), display);

        for labels in &maps {
            prop_assert_eq!(reparsed.matches(labels), parsed.matches(labels));
            let each = requirements.iter().all(|r| r.matches(labels));
            prop_assert_eq!(parsed.matches(labels), each);
        }
    }
}
