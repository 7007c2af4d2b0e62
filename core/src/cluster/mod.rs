//! Cluster resolution with TensorFlow's semantics (`tf.train.ClusterSpec`,
//! `tf.distribute.cluster_resolver.*`, `multi_worker_util`), as pure functions of their inputs.

pub mod error;
pub mod resolver;
pub mod spec;

pub use error::{ClusterError, TfException};
pub use resolver::{
    Accelerators, ClusterResolver, Device, DeviceMatch, count_accelerators, format_master_url,
};
pub use spec::{ClusterSpec, JobDef, TaskIndex, Tasks};

pub mod multi_worker;
pub mod simple;
pub mod tfconfig;
pub mod union;

pub use multi_worker::Role;
pub use simple::SimpleResolver;
pub use tfconfig::{TfConfigResolver, render_tf_config};
pub use union::{UnionResolver, merge_clusters};
pub mod kubernetes;
pub mod launch;
pub mod pods;
pub mod request;
pub mod selector;
pub mod slurm;

pub use kubernetes::{AddressSource, KubernetesConfig, KubernetesResolver, Membership, PodLister};
pub use launch::{Launch, LaunchOptions, ProcessGroup, process_group};
pub use request::{ResolveReply, ResolveRequest, Resolver};
pub use selector::LabelSelector;
pub use slurm::SlurmResolver;
