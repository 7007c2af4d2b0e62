//! The seed example's flow, run as a test so that it cannot rot.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_flow_prints_the_range() {
    let mut out: Vec<u8> = Vec::new();
    let run = shardwise_examples::seed::run(&mut out);
    tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .expect("the seed flow finishes within a minute")
        .expect("the seed flow succeeds");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n\
         distributed_epoch over 2 workers, sorted: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
    );
}
