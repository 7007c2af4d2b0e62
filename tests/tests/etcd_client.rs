//! `shardwise_gateway::etcd` against a real 3-member etcd cluster (`shardwise_tests::etcd`;
//! needs `etcd` on the PATH, Debian's `etcd-server`, which `.ci/run` installs): keys, fenced
//! transactions, leases, watches, paged reads of large values, failover between members and
//! the loss and return of quorum.

use std::future::Future;
use std::time::{Duration, Instant};

use shardwise_gateway::etcd::{
    Client, Compare, CompareResult, Error, EventType, Options, RangeOptions, RequestOp, TxnRequest,
    prefix_end,
};
use shardwise_tests::etcd::EtcdCluster;

/// Every call's bound per member: short, so the tests of dead members stay short.
const TIMEOUT: Duration = Duration::from_secs(1);

fn options() -> Options {
    Options { connect_timeout: Duration::from_millis(500), request_timeout: TIMEOUT }
}

/// Calls `f` until it succeeds, for at most `deadline` (pausing 20 ms between calls): its
/// value. Panics with the last error otherwise.
async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let end = Instant::now() + deadline;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= end => {
                panic!("{what}: not within {deadline:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The value of `key`, if any.
async fn get(client: &Client, key: &str) -> Option<Vec<u8>> {
    let r = client.range(key, "", RangeOptions::default()).await.expect("range");
    assert!(r.kvs.len() <= 1);
    r.kvs.into_iter().next().map(|kv| kv.value)
}

/// Campaigns: puts `leader` under a fresh lease; the key's create revision (the term).
async fn campaign(client: &Client, who: &str) -> i64 {
    let (lease, ttl) = client.lease_grant(10).await.expect("lease grant");
    assert!(ttl > 0 && ttl <= 10, "{ttl}");
    let put = client.put("leader", who, lease).await.expect("put leader");
    let r = client.range("leader", "", RangeOptions::default()).await.expect("range leader");
    let kv = &r.kvs[0];
    assert_eq!((kv.lease, kv.value.as_slice()), (lease, who.as_bytes()));
    assert_eq!(kv.create_revision, put.revision());
    kv.create_revision
}

/// A journal write fenced by the leader key: whether it wrote.
async fn fenced_put(client: &Client, term: i64, key: &str, value: &str) -> bool {
    let request = TxnRequest {
        compare: vec![Compare::create_revision("leader", CompareResult::Equal, term)],
        success: vec![
            RequestOp::put(key, value, 0),
            RequestOp::range(key, "", RangeOptions::default()),
        ],
        failure: vec![],
    };
    let r = client.txn(request).await.expect("txn");
    assert_eq!(r.responses.len(), if r.succeeded { 2 } else { 0 });
    r.succeeded
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_txns_leases_watches_and_paged_reads() {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start(3);
    cluster.ready();
    let client = Client::new(&cluster.client_urls(), options()).expect("client");

    // Put, range, delete.
    let first = client.put("k/1", "one", 0).await.expect("put");
    client.put("k/2", "two", 0).await.expect("put");
    assert!(first.revision() > 1);
    assert_eq!(get(&client, "k/1").await.as_deref(), Some(&b"one"[..]));
    let all = client.range("k/", prefix_end(b"k/"), RangeOptions::default()).await.expect("range");
    let keys: Vec<_> = all.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [&b"k/1"[..], b"k/2"]);
    let limited = RangeOptions { limit: 1, ..RangeOptions::default() };
    let page = client.range("k/", prefix_end(b"k/"), limited).await.expect("range");
    assert_eq!((page.kvs.len(), page.more, page.count), (1, true, 2));
    let old = RangeOptions { revision: first.revision(), ..RangeOptions::default() };
    assert_eq!(client.range("k/2", "", old).await.expect("range").kvs.len(), 0);
    assert_eq!(client.delete_range("k/", prefix_end(b"k/")).await.expect("delete").deleted, 2);
    assert_eq!(get(&client, "k/1").await, None);

    // Fencing: a write guarded by the current term commits; after another campaign (the key
    // deleted and created again), the old term's write does not, and writes nothing.
    let term1 = campaign(&client, "a").await;
    assert!(fenced_put(&client, term1, "journal/1", "from a").await);
    assert_eq!(get(&client, "journal/1").await.as_deref(), Some(&b"from a"[..]));
    client.delete_range("leader", "").await.expect("delete leader");
    let term2 = campaign(&client, "b").await;
    assert!(term2 > term1);
    assert!(!fenced_put(&client, term1, "journal/2", "from a, deposed").await);
    assert_eq!(get(&client, "journal/2").await, None);
    assert!(fenced_put(&client, term2, "journal/2", "from b").await);
    assert_eq!(get(&client, "journal/2").await.as_deref(), Some(&b"from b"[..]));

    // A lease kept alive keeps its key; left alone it expires and takes the key with it.
    let (lease, ttl) = client.lease_grant(2).await.expect("lease grant");
    assert_eq!(ttl, 2);
    client.put("leased", "x", lease).await.expect("put leased");
    let ttl = client.lease_keep_alive(lease).await.expect("keep alive");
    assert!(ttl > 0 && ttl <= 2, "{ttl}");
    eventually("the leased key expires", Duration::from_secs(10), || async {
        match get(&client, "leased").await {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        }
    })
    .await;
    assert!(matches!(client.lease_keep_alive(lease).await, Err(Error::LeaseGone)));
    assert!(matches!(client.put("leased", "y", lease).await, Err(Error::LeaseGone)));
    assert!(matches!(client.lease_revoke(lease).await, Err(Error::LeaseGone)));

    // Revoking a lease deletes its keys at once.
    let (lease, _) = client.lease_grant(60).await.expect("lease grant");
    client.put("revoked", "x", lease).await.expect("put");
    client.lease_revoke(lease).await.expect("revoke");
    assert_eq!(get(&client, "revoked").await, None);
    assert!(matches!(client.lease_keep_alive(lease).await, Err(Error::LeaseGone)));

    // A watch from a revision delivers the changes since, in order, then new ones.
    let from = client.put("w/0", "before", 0).await.expect("put").revision() + 1;
    for i in 1..=3 {
        client.put(format!("w/{i}"), format!("v{i}"), 0).await.expect("put");
    }
    client.delete_range("w/1", "").await.expect("delete");
    client.put("elsewhere", "not watched", 0).await.expect("put");
    let mut watch = client.watch("w/", prefix_end(b"w/"), from).await.expect("watch");
    let mut seen = Vec::new();
    let mut last = 0;
    while seen.len() < 5 {
        if seen.len() == 4 {
            client.put("w/4", "after", 0).await.expect("put");
        }
        let batch = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("a batch within 5 s")
            .expect("watch");
        assert!(batch.revision >= last);
        last = batch.revision;
        for event in batch.events {
            let kind = event.r#type();
            let kv = event.kv.expect("kv");
            assert!(kv.mod_revision >= from && kv.mod_revision <= batch.revision);
            seen.push((kind, String::from_utf8(kv.key).expect("utf-8"), kv.mod_revision));
        }
    }
    let kinds: Vec<_> = seen.iter().map(|(t, k, _)| (*t, k.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (EventType::Put, "w/1"),
            (EventType::Put, "w/2"),
            (EventType::Put, "w/3"),
            (EventType::Delete, "w/1"),
            (EventType::Put, "w/4"),
        ]
    );
    assert!(seen.windows(2).all(|w| w[0].2 < w[1].2), "{seen:?}");
    // A progress notification: no events, every change up to the current revision delivered.
    let now = client.range("w/4", "", RangeOptions::default()).await.expect("range").revision();
    watch.request_progress().await.expect("progress request");
    let progress = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("progress within 5 s")
        .expect("progress");
    assert!(progress.events.is_empty() && progress.revision >= now, "{progress:?}");
    drop(watch);

    // A range too large for one answer is read page by page at one revision: eight small
    // values, then twenty of 1 MiB (more than the client decodes in one answer).
    for i in 0..8 {
        client.put(format!("big/{i:02}"), format!("small {i}"), 0).await.expect("put");
    }
    let value = |i: usize| vec![b'a' + (i % 26) as u8; 1 << 20];
    for i in 8..28 {
        client.put(format!("big/{i:02}"), value(i), 0).await.expect("put 1 MiB");
    }
    let whole = client.range("big/", prefix_end(b"big/"), RangeOptions::default()).await;
    assert!(
        matches!(&whole, Err(Error::Rejected { code: tonic::Code::OutOfRange, .. })),
        "one answer of 20 MiB: {whole:?}"
    );
    let all = client.range_all("big/", prefix_end(b"big/"), 0).await.expect("range all");
    assert_eq!(all.kvs.len(), 28);
    for (i, kv) in all.kvs.iter().enumerate() {
        assert_eq!(kv.key, format!("big/{i:02}").into_bytes());
        if i < 8 {
            assert_eq!(kv.value, format!("small {i}").into_bytes());
        } else {
            assert!(kv.value == value(i), "value {i}");
        }
    }
    // At a revision: what the range was then, whatever happened since.
    let then = all.revision;
    client.put("big/27", "overwritten", 0).await.expect("put");
    client.delete_range("big/00", "").await.expect("delete");
    let at = client.range_all("big/", prefix_end(b"big/"), then).await.expect("range all at");
    assert_eq!(at.revision, then);
    assert_eq!(at.kvs.len(), 28);
    assert!(at.kvs[27].value == value(27));
    let now = client.range_all("big/", prefix_end(b"big/"), 0).await.expect("range all");
    assert!(now.revision > then);
    assert_eq!(now.kvs.len(), 27);
    assert_eq!(now.kvs[26].value, b"overwritten");

    // Compaction: a watch from a compacted revision ends with `Compacted`.
    let latest = client.put("w/5", "latest", 0).await.expect("put").revision();
    client.compact(latest).await.expect("compact");
    let mut stale = client.watch("w/", prefix_end(b"w/"), from).await.expect("watch");
    let compacted = tokio::time::timeout(Duration::from_secs(5), stale.next())
        .await
        .expect("an answer within 5 s");
    assert!(
        matches!(compacted, Err(Error::Compacted { compact_revision }) if compact_revision == latest),
        "{compacted:?}"
    );
    let mut fresh = client.watch("w/", prefix_end(b"w/"), latest).await.expect("watch");
    let batch = fresh.next().await.expect("watch from the compaction revision");
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.revision, latest);

    let total = started.elapsed();
    eprintln!("etcd client tests took {total:?}");
    assert!(total < Duration::from_secs(30), "the test took {total:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_fail_over_and_quorum_loss_is_unavailable() {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start(3);
    cluster.ready();
    let urls = cluster.client_urls();
    let client = Client::new(&urls, options()).expect("client");
    client.put("before", "1", 0).await.expect("put");
    let mut watch = client.watch("w/", prefix_end(b"w/"), 0).await.expect("watch");

    // Member 0 (the first endpoint of every client here) dies: calls go on on the others,
    // once they have a leader (when member 0 led, the other two elect one first: puts are
    // UNAVAILABLE, "no leader", for about an election timeout).
    cluster.kill(0);
    eventually("a put with one member dead", Duration::from_secs(10), || async {
        client.put("one-dead", "1", 0).await.map_err(|e| e.to_string())
    })
    .await;
    let fresh = Client::new(&urls, options()).expect("client");
    let t = Instant::now();
    fresh.put("one-dead-fresh", "1", 0).await.expect("put from a new client");
    assert!(t.elapsed() < TIMEOUT, "a refused connection costs nothing: {:?}", t.elapsed());
    assert_eq!(get(&fresh, "one-dead").await.as_deref(), Some(&b"1"[..]));
    // The watch was on member 0: its stream broke (or it was elsewhere and still delivers).
    client.put("w/1", "1", 0).await.expect("put");
    let next =
        tokio::time::timeout(Duration::from_secs(5), watch.next()).await.expect("within 5 s");
    match next {
        Ok(batch) => assert_eq!(batch.events.len(), 1),
        Err(e) => assert!(matches!(e, Error::Unavailable { .. }), "{e}"),
    }

    // Two of three dead: no quorum, so a put fails, within about one request timeout (the
    // dead members refuse connections; the last one has no leader or does not answer in time).
    cluster.kill(1);
    let t = Instant::now();
    let lost = client.put("no-quorum", "1", 0).await;
    let took = t.elapsed();
    assert!(matches!(&lost, Err(Error::Unavailable { .. })), "{lost:?}");
    assert!(took < 3 * TIMEOUT, "Unavailable after {took:?}");
    let lost = fresh.range("before", "", RangeOptions::default()).await;
    assert!(matches!(&lost, Err(Error::Unavailable { .. })), "a read without quorum: {lost:?}");

    // Both back: puts commit again, and what was acknowledged is there.
    let t = Instant::now();
    cluster.restart(0);
    cluster.restart(1);
    cluster.ready();
    eventually("a put after quorum returned", Duration::from_secs(10), || async {
        client.put("quorum-back", "1", 0).await.map_err(|e| e.to_string())
    })
    .await;
    let back = t.elapsed();
    for key in ["before", "one-dead", "one-dead-fresh", "quorum-back"] {
        assert_eq!(get(&client, key).await.as_deref(), Some(&b"1"[..]), "{key}");
    }
    let on_first = Client::new(&urls[..1], options()).expect("client");
    assert_eq!(get(&on_first, "quorum-back").await.as_deref(), Some(&b"1"[..]));

    let total = started.elapsed();
    eprintln!(
        "etcd failover test: unavailable after {took:?} without quorum, a put {back:?} after \
         the restarts, total {total:?}"
    );
    assert!(total < Duration::from_secs(30), "the test took {total:?}");
}
