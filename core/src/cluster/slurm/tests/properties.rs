//! Properties: expansion never panics, and resolved steps agree with a model.

use super::*;

proptest! {
    #[test]
    fn expansion_never_panics_on_any_string(s in any::<String>()) {
        let _ = expand_hostlist(&s);
        let _ = expand_tasks_per_node(&s);
    }

    #[test]
    fn expansion_never_panics_on_list_like_strings(s in "[a-c0-9\\[\\],x() _+\n-]{0,40}") {
        if let Err(e) = expand_hostlist(&s) {
            prop_assert_eq!(e.code(), "INVALID_ARGUMENT");
        }
        if let Ok(counts) = expand_tasks_per_node(&s) {
            prop_assert!(counts.len() <= DEFAULT_MAX_TASKS);
        }
    }

    #[test]
    fn plain_names_round_trip(
        names in proptest::collection::vec("[a-z][a-z0-9.-]{0,8}", 1..8),
    ) {
        prop_assert_eq!(expand_hostlist(&names.join(",")).unwrap(), names);
    }

    #[test]
    fn ranges_match_a_model(lo in 0_u64..300, len in 0_u64..40, pad in 0_usize..4) {
        let hi = lo + len;
        let start = format!("{}{lo}", "0".repeat(pad));
        let width = start.len();
        let got = expand_hostlist(&format!("p[{start}-{hi}]")).unwrap();
        let want: Vec<String> = (lo..=hi).map(|n| format!("p{n:0width$}")).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn resolver_never_panics(
        rank in prop_oneof![
            6 => (0_u32..10).prop_map(|r| r.to_string()),
            1 => "[0-9]{2}|-1|x| 3",
        ],
        num_tasks in "[0-9]{1,2}",
        matching_jobs in any::<bool>(),
        nodelist in "[ab](\\[[0-9](-[0-9])?\\])?(,[a-c][0-9]?){0,3}",
        tasks in "[0-3](\\(x[0-3]\\))?(,[0-3](\\(x[0-3]\\))?){0,3}",
        cuda in proptest::option::of("[0-3]?(,[0-3]){0,3}"),
        gpus_per_node in proptest::option::of(0_u32..9),
        gpus_per_task in proptest::option::of(0_u32..3),
        port_base in any::<u16>(),
        detected in proptest::option::of(0_u32..9),
    ) {
        // A model of the task configuration, to make the job sizes add up half the time.
        let model: BTreeMap<String, u32> = expand_hostlist(&nodelist)
            .unwrap_or_default()
            .into_iter()
            .zip(expand_tasks_per_node(&tasks).unwrap_or_default())
            .collect();
        let model_total: u64 = model.values().map(|&n| u64::from(n)).sum();
        let num_tasks = if matching_jobs { model_total.to_string() } else { num_tasks };
        let mut vars = env(&[
            ("SLURM_PROCID", &rank),
            ("SLURM_STEP_NUM_TASKS", &num_tasks),
            ("SLURM_STEP_NODELIST", &nodelist),
            ("SLURM_STEP_TASKS_PER_NODE", &tasks),
        ]);
        if let Some(cuda) = cuda {
            vars.insert(CUDA_VISIBLE_DEVICES.to_owned(), cuda);
        }
        let cfg =
            SlurmConfig { gpus_per_node, gpus_per_task, port_base, ..SlurmConfig::default() };
        if let Ok(r) = SlurmResolver::new(cfg, &vars, detected) {
            prop_assert_eq!(r.task_configuration(), &model);
            prop_assert_eq!(r.gpu_allocation().len() as u64, model_total);
            let inside = r.rank() < model_total;
            prop_assert_eq!(r.cluster_spec().is_ok(), inside);
            prop_assert_eq!(r.environment_updates().is_ok(), inside);
            prop_assert_eq!(r.task_type().unwrap().is_some(), inside);
            let per_task = u64::from(r.gpus_per_task());
            for gpus in r.gpu_allocation() {
                let count = gpus.split(',').filter(|g| !g.is_empty()).count() as u64;
                prop_assert_eq!(count, per_task);
            }
            if let Ok(spec) = r.cluster_spec() {
                prop_assert_eq!(spec.total_tasks() as u64, model_total);
                let master = r.master(None, None, None).unwrap();
                prop_assert!(master.starts_with("grpc://"), "{}", master);
            }
        }
    }
}
