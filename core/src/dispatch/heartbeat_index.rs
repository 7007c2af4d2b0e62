//! The heartbeat index: the workers of [`State::workers`](super::State::workers) in a hash map
//! whose buckets hold, inline, everything a steady-state heartbeat reads and writes.
//!
//! A heartbeat from one of 10,000 workers must cost what it costs with 100. The ordered map
//! (the serialized truth, whose order task creation and replay depend on) takes about 13
//! comparisons of cold heap strings to find a worker. Here it is one hash probe into one
//! bucket: the address is compared, and the uid, the tasks, the liveness flag and the
//! last-seen time are read and written, without following a pointer, as long as the
//! address, the uid and the task list are short (K8s-style addresses, UUIDs, a handful of
//! tasks); longer ones go to the heap and cost one more cache miss.
//!
//! The index is derived state: [`super::state::apply`] keeps it in step with every change to
//! a worker, [`super::State::reindex`] rebuilds it, and it is neither serialized nor part of
//! the state's equality. Only `seen` is the dispatcher's own (liveness, not durable).

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::state::Worker;
use super::types::{Millis, TaskId};

/// Address bytes kept in the bucket (`<pod>.<service>.<namespace>.svc:<port>` fits).
const ADDRESS_INLINE: usize = 78;
/// Uid bytes kept in the bucket (a UUID is 36).
const UID_INLINE: usize = 38;
/// Task ids kept in the bucket.
const TASKS_INLINE: usize = 3;

/// Bytes stored inline when there are at most `N` (`N` < 256), on the heap otherwise.
#[derive(Clone)]
pub(crate) enum SmallBytes<const N: usize> {
    /// Length and bytes (zero after the length).
    Inline(u8, [u8; N]),
    /// Longer than `N`.
    Heap(Box<[u8]>),
}

impl<const N: usize> SmallBytes<N> {
    fn new(bytes: &[u8]) -> Self {
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= N => {
                let mut buf = [0; N];
                buf[..bytes.len()].copy_from_slice(bytes);
                SmallBytes::Inline(len, buf)
            }
            _ => SmallBytes::Heap(bytes.into()),
        }
    }

    /// The bytes.
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            SmallBytes::Inline(len, buf) => &buf[..usize::from(*len)],
            SmallBytes::Heap(bytes) => bytes,
        }
    }
}

/// Hash and equality are those of the bytes, so the map is probed with `&[u8]`.
impl<const N: usize> Borrow<[u8]> for SmallBytes<N> {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl<const N: usize> Hash for SmallBytes<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl<const N: usize> PartialEq for SmallBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> Eq for SmallBytes<N> {}

impl<const N: usize> fmt::Debug for SmallBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&String::from_utf8_lossy(self.as_bytes()), f)
    }
}

/// Ascending task ids, inline when there are at most [`TASKS_INLINE`].
#[derive(Clone)]
pub(crate) enum TaskList {
    /// How many, and the ids.
    Inline(u8, [TaskId; TASKS_INLINE]),
    /// More than [`TASKS_INLINE`] (at some point: it goes back inline when it empties). A
    /// ring, since tasks are mostly created newest last and finished oldest first: both ends
    /// change in O(1).
    Heap(VecDeque<TaskId>),
}

impl TaskList {
    fn new(tasks: &BTreeSet<TaskId>) -> Self {
        if tasks.len() <= TASKS_INLINE {
            let mut ids = [TaskId(0); TASKS_INLINE];
            for (slot, t) in ids.iter_mut().zip(tasks) {
                *slot = *t;
            }
            TaskList::Inline(tasks.len() as u8, ids)
        } else {
            TaskList::Heap(tasks.iter().copied().collect())
        }
    }

    /// Adds `id` in order: O(1) for the usual newest id, a move of the larger ones otherwise
    /// (never a rebuild of the list).
    fn insert(&mut self, id: TaskId) {
        match self {
            TaskList::Inline(len, ids) => {
                let n = usize::from(*len);
                let Err(at) = ids[..n].binary_search(&id) else { return };
                if n < TASKS_INLINE {
                    ids.copy_within(at..n, at + 1);
                    ids[at] = id;
                    *len += 1;
                } else {
                    let mut v = VecDeque::with_capacity(2 * TASKS_INLINE);
                    v.extend(&ids[..n]);
                    v.insert(at, id);
                    *self = TaskList::Heap(v);
                }
            }
            TaskList::Heap(v) => match v.back() {
                Some(last) if *last < id => v.push_back(id),
                None => v.push_back(id),
                _ => {
                    if let Err(at) = v.binary_search(&id) {
                        v.insert(at, id);
                    }
                }
            },
        }
    }

    /// Removes `id`: O(1) at either end, else a binary search and a move of the shorter side.
    fn remove(&mut self, id: TaskId) {
        match self {
            TaskList::Inline(len, ids) => {
                let n = usize::from(*len);
                if let Ok(at) = ids[..n].binary_search(&id) {
                    ids.copy_within(at + 1..n, at);
                    ids[n - 1] = TaskId(0);
                    *len -= 1;
                }
            }
            TaskList::Heap(v) => {
                if let Ok(at) = v.binary_search(&id) {
                    v.remove(at);
                }
                if v.is_empty() {
                    *self = TaskList::Inline(0, [TaskId(0); TASKS_INLINE]);
                }
            }
        }
    }

    /// The ids, ascending.
    #[inline]
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = TaskId> + '_ {
        let (inline, heap): (&[TaskId], Option<&VecDeque<TaskId>>) = match self {
            TaskList::Inline(len, ids) => (&ids[..usize::from(*len)], None),
            TaskList::Heap(ids) => (&[], Some(ids)),
        };
        TaskIter { inline: inline.iter(), heap: heap.map(|h| h.iter()) }
    }
}

/// [`TaskList::iter`]'s iterator.
struct TaskIter<'a> {
    inline: std::slice::Iter<'a, TaskId>,
    heap: Option<std::collections::vec_deque::Iter<'a, TaskId>>,
}

impl Iterator for TaskIter<'_> {
    type Item = TaskId;
    #[inline]
    fn next(&mut self) -> Option<TaskId> {
        match &mut self.heap {
            Some(h) => h.next().copied(),
            None => self.inline.next().copied(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.heap.as_ref().map_or(self.inline.len(), ExactSizeIterator::len);
        (n, Some(n))
    }
}

impl ExactSizeIterator for TaskIter<'_> {}

impl PartialEq for TaskList {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for TaskList {}

impl fmt::Debug for TaskList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One worker's bucket value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatEntry {
    /// [`Worker::alive`].
    pub(crate) alive: bool,
    /// [`Worker::uid`].
    uid: Option<SmallBytes<UID_INLINE>>,
    /// [`Worker::tasks`].
    tasks: TaskList,
    /// Whether it is a TensorFlow worker ([`Worker::tensorflow`] is set).
    pub(crate) tensorflow: bool,
    /// When the dispatcher last heard from the worker (`None`: not since it registered or
    /// since the index was built). Liveness, not durable state: `apply` never sets it, the
    /// dispatcher does, and a recovered dispatcher counts every worker as heard from.
    pub(crate) seen: Option<Millis>,
}

impl HeartbeatEntry {
    fn of(w: &Worker) -> Self {
        HeartbeatEntry {
            alive: w.alive,
            uid: w.uid.as_deref().map(|u| SmallBytes::new(u.as_bytes())),
            tasks: TaskList::new(&w.tasks),
            tensorflow: w.tensorflow.is_some(),
            seen: None,
        }
    }

    /// [`Worker::uid`] equals `uid`.
    #[inline]
    pub(crate) fn uid_is(&self, uid: Option<&str>) -> bool {
        self.uid.as_ref().map(SmallBytes::as_bytes) == uid.map(str::as_bytes)
    }

    /// Whether a request carrying `uid` may act for this worker: any may when it registered
    /// without a uid, else only one carrying the same uid.
    #[inline]
    pub(crate) fn holds_uid(&self, uid: Option<&str>) -> bool {
        self.uid.is_none() || self.uid_is(uid)
    }

    /// [`Worker::tasks`], ascending.
    #[inline]
    pub(crate) fn tasks(&self) -> impl ExactSizeIterator<Item = TaskId> + '_ {
        self.tasks.iter()
    }
}

/// See the module docs. Its iteration order is arbitrary: nothing may depend on it.
#[derive(Clone, Default)]
pub(crate) struct HeartbeatIndex(
    HashMap<SmallBytes<ADDRESS_INLINE>, HeartbeatEntry, BuildHasherDefault<FxHasher>>,
);

impl fmt::Debug for HeartbeatIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeartbeatIndex({} workers)", self.0.len())
    }
}

impl HeartbeatIndex {
    /// The index of `workers`, keeping the `seen` times `old` has for them.
    pub(crate) fn build(workers: &BTreeMap<String, Worker>, old: &HeartbeatIndex) -> Self {
        let mut map = HashMap::with_capacity_and_hasher(workers.len(), Default::default());
        for (address, w) in workers {
            let mut e = HeartbeatEntry::of(w);
            e.seen = old.get(address).and_then(|o| o.seen);
            map.insert(SmallBytes::new(address.as_bytes()), e);
        }
        HeartbeatIndex(map)
    }

    /// Mirrors the worker `w` at `address` (after `apply` changed or added it): its liveness,
    /// uid and kind. Its task list is kept in step one task at a time ([`Self::add_task`],
    /// [`Self::remove_task`]), and copied whole only for a worker new to the index.
    pub(crate) fn sync(&mut self, address: &str, w: &Worker) {
        match self.0.get_mut(address.as_bytes()) {
            Some(e) => {
                e.alive = w.alive;
                e.tensorflow = w.tensorflow.is_some();
                if !e.uid_is(w.uid.as_deref()) {
                    e.uid = w.uid.as_deref().map(|u| SmallBytes::new(u.as_bytes()));
                }
            }
            None => {
                self.0.insert(SmallBytes::new(address.as_bytes()), HeartbeatEntry::of(w));
            }
        }
    }

    /// `task` was added to the tasks of the worker at `address`.
    pub(crate) fn add_task(&mut self, address: &str, task: TaskId) {
        if let Some(e) = self.0.get_mut(address.as_bytes()) {
            e.tasks.insert(task);
        }
    }

    /// `task` was removed from the tasks of the worker at `address`.
    pub(crate) fn remove_task(&mut self, address: &str, task: TaskId) {
        if let Some(e) = self.0.get_mut(address.as_bytes()) {
            e.tasks.remove(task);
        }
    }

    /// The worker at `address` was forgotten.
    pub(crate) fn remove(&mut self, address: &str) {
        self.0.remove(address.as_bytes());
    }

    /// The entry of the worker at `address`.
    #[inline]
    pub(crate) fn get(&self, address: &str) -> Option<&HeartbeatEntry> {
        self.0.get(address.as_bytes())
    }

    /// The entry of the worker at `address`, to record when it was heard from.
    #[inline]
    pub(crate) fn get_mut(&mut self, address: &str) -> Option<&mut HeartbeatEntry> {
        self.0.get_mut(address.as_bytes())
    }

    /// Every worker's address and entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Cow<'_, str>, &HeartbeatEntry)> + '_ {
        self.0.iter().map(|(a, e)| (String::from_utf8_lossy(a.as_bytes()), e))
    }

    /// Every entry, in no particular order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut HeartbeatEntry> + '_ {
        self.0.values_mut()
    }

    /// Whether the index mirrors `workers` exactly (`seen` aside).
    pub(crate) fn check(&self, workers: &BTreeMap<String, Worker>) -> Result<(), String> {
        if self.0.len() != workers.len() {
            return Err(format!(
                "the heartbeat index has {} workers, the state {}",
                self.0.len(),
                workers.len()
            ));
        }
        for (address, w) in workers {
            let want = HeartbeatEntry::of(w);
            match self.get(address) {
                Some(got) if HeartbeatEntry { seen: None, ..got.clone() } == want => {}
                got => {
                    return Err(format!("worker {address}: index has {got:?}, state {want:?}"));
                }
            }
        }
        Ok(())
    }
}

/// The Fx hash (rustc's): a multiply and a rotate per 8 bytes, several times cheaper than
/// SipHash on 50-byte addresses. Not collision resistant against chosen keys, which matters
/// little here: whoever can choose worker addresses can register any number of workers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0xf135_7aea_2e62_a9c5;
const FX_FOLD: u64 = 0x9e37_79b9_7f4a_7c15;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash ^ word).wrapping_mul(FX_SEED).rotate_left(5);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The steps above are bijective, so distinct keys of a length keep distinct states,
        // but a multiply mixes only upwards and the map takes buckets from the low bits and
        // tags from the high ones: fold a full 128-bit product so every bit depends on all.
        let m = u128::from(self.hash) * u128::from(FX_FOLD);
        (m as u64) ^ ((m >> 64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(address: &str, uid: Option<&str>, tasks: &[u64]) -> Worker {
        Worker {
            address: address.into(),
            tags: Vec::new(),
            alive: true,
            uid: uid.map(Into::into),
            tasks: tasks.iter().map(|t| TaskId(*t)).collect(),
            tensorflow: None,
        }
    }

    #[test]
    fn short_and_long_fields_round_trip() {
        let long = "x".repeat(300);
        let mut workers = BTreeMap::new();
        for (a, uid, tasks) in [
            ("a:1", None, &[][..]),
            ("b:1", Some("u"), &[1, 2, 3][..]),
            (long.as_str(), Some(long.as_str()), &[4, 5, 6, 7][..]),
            ("", Some(""), &[8][..]),
        ] {
            workers.insert(a.to_owned(), worker(a, uid, tasks));
        }
        let index = HeartbeatIndex::build(&workers, &HeartbeatIndex::default());
        index.check(&workers).unwrap();
        let e = index.get(&long).unwrap();
        assert!(e.uid_is(Some(&long)) && !e.uid_is(None) && !e.uid_is(Some("x")));
        assert!(e.tasks().eq([4, 5, 6, 7].map(TaskId)));
        assert!(index.get("b:1").unwrap().uid_is(Some("u")));
        assert!(index.get("a:1").unwrap().uid_is(None));
        assert!(index.get("").unwrap().uid_is(Some("")));
        assert!(index.get("b:1\0").is_none() && index.get("b:").is_none());
        let mut index = index;
        let mut w = workers[&long].clone();
        for t in std::mem::take(&mut w.tasks) {
            index.remove_task(&long, t);
        }
        w.uid = None;
        w.alive = false;
        index.sync(&long, &w);
        workers.insert(long.clone(), w);
        index.check(&workers).unwrap();
        let mut names: Vec<String> = index.iter().map(|(a, _)| a.into_owned()).collect();
        names.sort();
        assert_eq!(names, workers.keys().cloned().collect::<Vec<_>>());
    }

    /// A worker's task list changes one task at a time (it used to be rebuilt and
    /// compared whole on every change: quadratic in the tasks a worker held), and always
    /// equals the list built from the worker's set, inline or on the heap.
    #[test]
    fn task_lists_change_one_task_at_a_time() {
        let mut set = BTreeSet::new();
        let mut list = TaskList::new(&set);
        // Ascending creation (the usual case), removals from the front, the middle and the
        // end, out-of-order inserts, duplicates and absent ids.
        let ops: Vec<(bool, u64)> = (0..40)
            .map(|i| (true, i * 3))
            .chain([(false, 0), (false, 57), (false, 117), (true, 58), (true, 1), (true, 58)])
            .chain([(false, 1000), (false, 3), (true, 2)])
            .chain((0..40).map(|i| (false, i * 3)))
            .chain([(false, 58), (false, 1), (false, 2), (true, 9), (true, 4), (true, 7)])
            .chain([(true, 5), (false, 4)])
            .collect();
        for (insert, id) in ops {
            let id = TaskId(id);
            if insert {
                set.insert(id);
                list.insert(id);
            } else {
                set.remove(&id);
                list.remove(id);
            }
            assert_eq!(list, TaskList::new(&set), "after {insert} {id:?}");
            assert!(list.iter().eq(set.iter().copied()));
            assert_eq!(list.iter().len(), set.len());
        }
        // 100,000 tasks created and finished in order: each change is O(1) amortized, not
        // a copy of the list (a rebuild per change would take minutes here).
        let mut list = TaskList::new(&BTreeSet::new());
        for i in 0..100_000 {
            list.insert(TaskId(i));
        }
        for i in 0..100_000 {
            list.remove(TaskId(i));
        }
        assert_eq!(list.iter().len(), 0);
        assert!(matches!(list, TaskList::Inline(0, _)));
    }

    #[test]
    fn fx_spreads_similar_addresses() {
        use std::collections::HashSet;
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<FxHasher>::default();
        for address in [
            |i: usize| format!("w-{i:05}.svc:5050"),
            |i: usize| format!("shardwise-worker-{i:05}.shardwise-workers.ml.svc:5050"),
            |i: usize| format!("10.0.{}.{}:5050", i / 256, i % 256),
            |i: usize| format!("worker-{i}"),
        ] {
            let hashes: Vec<u64> =
                (0..10_000).map(|i| build.hash_one(address(i).as_bytes())).collect();
            // 10,000 keys in 16,384 buckets (the low bits): about 7,490 distinct buckets if
            // spread at random; 128 tags (the top 7 bits): all of them.
            let buckets: HashSet<u64> = hashes.iter().map(|h| h & 0x3fff).collect();
            let tags: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            assert!(buckets.len() > 7_200, "{} distinct buckets ({})", buckets.len(), address(1));
            assert_eq!(tags.len(), 128, "{}", address(1));
        }
    }
}
