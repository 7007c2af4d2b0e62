//! A task driver's reads of columnar files: the rows its pipeline asks for
//! ([`Action::ReadRows`](shardwise_core::worker::Action::ReadRows)), a chunk at a time, from a
//! reader kept open between chunks.
//!
//! The pipeline asks for the rows of a file from a start row; the next request of the same
//! file starts where the last chunk ended, so the reader that gave that chunk is kept and goes
//! on (a Parquet file is not opened and its footer not read again per chunk). Decoding runs on
//! tokio's blocking threads.
//!
//! Every chunk of a task must have the same schema: a read hands out record batches of one
//! Arrow stream, and a JSON client expects the same fields on every row. A file whose columns
//! differ from the task's earlier files fails the task, naming the first column that differs.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use shardwise_core::code::Code;
use shardwise_core::dataset::{Chunk, FilesDef, RowsRequest, SourceDef};
use shardwise_core::dispatch::wire::TaskDef;
use shardwise_core::worker::TaskError;

use super::columnar::{ReadOptions, RowReader, batch_bytes};
use super::columnar_out::FileRows;
use super::files::DataRoots;

/// The `files` source of a task's dataset, if it has one.
pub(crate) fn files_of(def: &TaskDef) -> Option<&FilesDef> {
    match &def.dataset.declarative()?.source {
        SourceDef::Files(files) => Some(files),
        _ => None,
    }
}

/// The columnar reads of one task.
#[derive(Debug, Default)]
pub(crate) struct RowsReads {
    /// The reader of the last chunk, with the path and end it was opened for.
    open: Option<(String, Option<u64>, RowReader)>,
    /// The schema of the task's first chunk.
    schema: Option<SchemaRef>,
}

impl RowsReads {
    /// The next chunk of `request`'s rows of a file of `files`, and whether it is the last.
    pub(crate) async fn next(
        &mut self,
        roots: &DataRoots,
        files: &Arc<FilesDef>,
        request: &RowsRequest,
        options: ReadOptions,
    ) -> Result<(Chunk, bool), TaskError> {
        let reader = self.open.take().and_then(|(path, stop, reader)| {
            (path == request.path && stop == request.stop && reader.position() == request.start)
                .then_some(reader)
        });
        let (roots, files, req) = (roots.clone(), Arc::clone(files), request.clone());
        let read = tokio::task::spawn_blocking(move || {
            let mut reader = match reader {
                Some(reader) => reader,
                None => RowReader::open(&roots, &files, &req, &options)?,
            };
            let (batch, last) = reader.next_chunk()?;
            Ok::<_, shardwise_http::Problem>((reader, batch, last))
        })
        .await;
        let (reader, batch, last) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(p)) => return Err(TaskError::new(p.code, p.detail)),
            Err(e) => {
                return Err(TaskError::new(
                    Code::Internal,
                    format!("the file reader stopped: {e}"),
                ));
            }
        };
        self.check_schema(&request.path, &batch)?;
        if !last {
            self.open = Some((request.path.clone(), request.stop, reader));
        }
        let rows = u64::try_from(batch.num_rows()).unwrap_or(u64::MAX);
        let bytes = batch_bytes(&batch);
        let first_row = request.start;
        let data = FileRows { batch, path: request.path.clone(), first_row };
        Ok((Chunk::new(rows, bytes, Arc::new(data)), last))
    }

    fn check_schema(&mut self, path: &str, batch: &RecordBatch) -> Result<(), TaskError> {
        let schema = batch.schema();
        let Some(first) = &self.schema else {
            self.schema = Some(schema);
            return Ok(());
        };
        if first.fields() == schema.fields() {
            return Ok(());
        }
        let differs = first
            .fields()
            .iter()
            .zip(schema.fields().iter())
            .find(|(a, b)| a != b)
            .map(|(a, b)| {
                format!(
                    "column {:?} is {} there, {} in the task's earlier files",
                    b.name(),
                    b.data_type(),
                    a.data_type()
                )
            })
            .unwrap_or_else(|| {
                let names = |s: &SchemaRef| {
                    s.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
                };
                format!(
                    "it has the columns [{}], the task's earlier files [{}]",
                    names(&schema),
                    names(first)
                )
            });
        Err(TaskError::new(
            Code::InvalidArgument,
            format!(
                "file {path:?} does not have the columns of the files read before it in this task: \
                 {differs} (declare the tensors, or project the same columns with `columns`)"
            ),
        ))
    }
}
