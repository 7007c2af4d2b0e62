//! Read position benchmarks: `merge_positions` of two positions of 50,000 entries each, of the
//! shape that made a merge quadratic (one reader has a split spanning 10^12 positions under
//! way and 50,000 small ones; the other finished one position inside each small split, so
//! nothing merges away and every done range falls inside a split under way), and of two
//! positions of 50,000 done ranges each that interleave.
//!
//! What the Python package's `shardwise.merge_positions` runs (its native module calls the
//! same function). Measured on a 2-core machine: about 0.10 s (tangled) and 0.04 s
//! (interleaved).
//!
//! `cargo bench -p shardwise-core --bench positions`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use shardwise_core::position::{PartialSplit, ReadPosition, SourceRange, merge_positions};

const N: u64 = 50_000;
const BIG: u64 = 1_000_000_000_000;

fn position(done: Vec<SourceRange>, partial: Vec<PartialSplit>) -> ReadPosition {
    ReadPosition { dataset_id: "d".into(), repetition: 0, done, partial }
}

/// The quadratic shape: splits under way against done ranges inside them.
fn tangled() -> [ReadPosition; 2] {
    let mut under_way = vec![PartialSplit::prefix(SourceRange { start: 0, stop: BIG }, 1)];
    under_way.extend((0..N).map(|i| {
        let start = BIG + 10 * i;
        PartialSplit::prefix(SourceRange { start, stop: start + 10 }, 1)
    }));
    let done = (0..N).map(|i| SourceRange { start: BIG + 10 * i + 5, stop: BIG + 10 * i + 6 });
    [position(Vec::new(), under_way), position(done.collect(), Vec::new())]
}

/// Two readers' done ranges, interleaved: every other one touches the next.
fn interleaved() -> [ReadPosition; 2] {
    let ranges = |offset: u64| {
        (0..N).map(|i| SourceRange { start: 4 * i + offset, stop: 4 * i + offset + 1 }).collect()
    };
    [position(ranges(0), Vec::new()), position(ranges(1), Vec::new())]
}

fn merge(c: &mut Criterion) {
    let mut group = c.benchmark_group("merge_positions");
    group.sample_size(10);
    let [a, b] = tangled();
    let merged = merge_positions([&a, &b]).expect("one read");
    assert_eq!((merged.done.len(), merged.partial.len()), (N as usize, N as usize + 1));
    group.bench_function("tangled_2x50000", |bench| {
        bench.iter(|| merge_positions([black_box(&a), black_box(&b)]).expect("one read"))
    });
    let [a, b] = interleaved();
    group.bench_function("interleaved_2x50000", |bench| {
        bench.iter(|| merge_positions([black_box(&a), black_box(&b)]).expect("one read"))
    });
    group.finish();
}

criterion_group!(benches, merge);
criterion_main!(benches);
