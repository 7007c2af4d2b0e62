//! The dataset ops by where their split providers come from, and the ops refused with why.

/// The one-input dataset ops whose split providers are their input dataset's (the first
/// input of the node), as TensorFlow's default for a dataset with one input has it. Their
/// other inputs and functions (a map function, a batch size, a seed) change the elements,
/// not where the splits come from: the datasets a function makes (interleave's and flat_map's
/// element datasets, group_by_window's windows) are iterated without the split providers in
/// TensorFlow (its nested iterator contexts drop them).
pub const PASS_THROUGH: &[&str] = &[
    "AssertCardinalityDataset",
    "AssertNextDataset",
    "AssertPrevDataset",
    "BatchDataset",
    "BatchDatasetV2",
    "BytesProducedStatsDataset",
    "CacheDataset",
    "CacheDatasetV2",
    "DenseToSparseBatchDataset",
    "ExperimentalAssertNextDataset",
    "ExperimentalBytesProducedStatsDataset",
    "ExperimentalDenseToSparseBatchDataset",
    "ExperimentalGroupByReducerDataset",
    "ExperimentalGroupByWindowDataset",
    "ExperimentalIgnoreErrorsDataset",
    "ExperimentalLatencyStatsDataset",
    "ExperimentalMapAndBatchDataset",
    "ExperimentalMaxIntraOpParallelismDataset",
    "ExperimentalParseExampleDataset",
    "ExperimentalPrivateThreadPoolDataset",
    "ExperimentalRebatchDataset",
    "ExperimentalScanDataset",
    "ExperimentalSleepDataset",
    "ExperimentalSlidingWindowDataset",
    "ExperimentalTakeWhileDataset",
    "ExperimentalUnbatchDataset",
    "ExperimentalUniqueDataset",
    "FilterDataset",
    "FinalizeDataset",
    "FlatMapDataset",
    "GroupByReducerDataset",
    "GroupByWindowDataset",
    "IgnoreErrorsDataset",
    "InterleaveDataset",
    "LatencyStatsDataset",
    "LegacyParallelInterleaveDatasetV2",
    "MapAndBatchDataset",
    "MapDataset",
    "MaxIntraOpParallelismDataset",
    "ModelDataset",
    "OptionsDataset",
    "PaddedBatchDataset",
    "PaddedBatchDatasetV2",
    "ParallelBatchDataset",
    "ParallelFilterDataset",
    "ParallelInterleaveDataset",
    "ParallelInterleaveDatasetV2",
    "ParallelInterleaveDatasetV3",
    "ParallelInterleaveDatasetV4",
    "ParallelMapDataset",
    "ParallelMapDatasetV2",
    "ParseExampleDataset",
    "ParseExampleDatasetV2",
    "PrefetchDataset",
    "PrivateThreadPoolDataset",
    "RebatchDataset",
    "RebatchDatasetV2",
    "RepeatDataset",
    "ScanDataset",
    "ShardDataset",
    "ShuffleAndRepeatDataset",
    "ShuffleAndRepeatDatasetV2",
    "ShuffleDataset",
    "ShuffleDatasetV2",
    "ShuffleDatasetV3",
    "SkipDataset",
    "SleepDataset",
    "SlidingWindowDataset",
    "TakeDataset",
    "TakeWhileDataset",
    "UnbatchDataset",
    "UniqueDataset",
    "WindowDataset",
];

/// The dataset ops whose split providers are those of all their dataset inputs, one input
/// after the other in input order (TensorFlow's `GetSplitProviders` over `InputDatasets`):
/// `zip`, `concatenate`, and `choose_from_datasets`/`sample_from_datasets`, whose first input
/// is the selector.
pub const ALL_INPUTS: &[&str] = &[
    "ConcatenateDataset",
    "DirectedInterleaveDataset",
    "ExperimentalDirectedInterleaveDataset",
    "ZipDataset",
];

/// The random-number sources (`Dataset.random`, the selector of `sample_from_datasets`): one
/// index split provider of 2^63 - 1 splits, as TensorFlow's (it never reads them).
pub const RANDOM: &[&str] = &["ExperimentalRandomDataset", "RandomDataset", "RandomDatasetV2"];

/// Dataset ops TensorFlow's dispatcher cannot make split providers for either, and why: a
/// DYNAMIC job over them fails on TensorFlow's dispatcher too (`UNIMPLEMENTED`).
pub const NOT_SHARDABLE: &[(&str, &str)] = &[
    (
        "SnapshotDataset",
        "TensorFlow does not implement splitting for snapshot datasets either; read it with \
         OFF or static sharding",
    ),
    (
        "SnapshotDatasetV2",
        "TensorFlow does not implement splitting for snapshot datasets either; read it with \
         OFF or static sharding",
    ),
    (
        "DataServiceDataset",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
    (
        "DataServiceDatasetV2",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
    (
        "DataServiceDatasetV3",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
    (
        "DataServiceDatasetV4",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
];
