//! The one table from the core's status classes to gRPC codes, and the refusals of the core's
//! conversions ([`shardwise_core::tensorflow::convert`]) and of the driver as statuses.

use shardwise_core::Code;
use shardwise_core::tensorflow::convert::ConvertError;
use tonic::Status;

use crate::http::Problem;

/// The one table: a status class of the core (or of the front) as a gRPC status. A caller's
/// mistake is never `INTERNAL`: only a bug is.
pub fn status(code: Code, detail: &str) -> Status {
    let code = match code {
        Code::InvalidArgument => tonic::Code::InvalidArgument,
        Code::Unauthenticated => tonic::Code::Unauthenticated,
        Code::PermissionDenied => tonic::Code::PermissionDenied,
        Code::NotFound => tonic::Code::NotFound,
        Code::AlreadyExists => tonic::Code::AlreadyExists,
        Code::FailedPrecondition => tonic::Code::FailedPrecondition,
        Code::ResourceExhausted => tonic::Code::ResourceExhausted,
        Code::Unavailable => tonic::Code::Unavailable,
        Code::Internal => tonic::Code::Internal,
    };
    Status::new(code, detail)
}

/// A refusal of the driver (the core's error, or the driver's own `UNAVAILABLE`) as a status.
pub fn from_problem(p: Problem) -> Status {
    status(p.code, &p.detail)
}

/// A message that does not convert (a negative id, an unknown enum value, ...) as a status.
pub fn from_convert(e: ConvertError) -> Status {
    status(e.code, &e.detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_class_has_its_grpc_code_and_caller_mistakes_are_not_internal() {
        for code in Code::ALL {
            let s = status(code, "why");
            assert_eq!(s.message(), "why");
            assert_eq!(
                s.code() == tonic::Code::Internal,
                code == Code::Internal,
                "{code:?} -> {:?}",
                s.code()
            );
        }
        assert_eq!(status(Code::FailedPrecondition, "").code(), tonic::Code::FailedPrecondition);
        assert_eq!(status(Code::NotFound, "").code(), tonic::Code::NotFound);
    }

    #[test]
    fn a_conversion_refusal_keeps_its_class_and_message() {
        let e = shardwise_core::tensorflow::convert::id("job_id", -1).unwrap_err();
        let s = from_convert(e);
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().contains("job_id must not be negative, got -1"), "{}", s.message());
    }
}
