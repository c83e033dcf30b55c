//! What the weir sources compiled here by path take from `crate::error`.

#![allow(dead_code)]

#[derive(Debug)]
pub enum Error {
    TooComplex(String),
    Corrupted(String),
    Internal(String),
    InvalidParameter(String),
    NotSupported(String),
    Arrow(datafusion::arrow::error::ArrowError),
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Error::Arrow(e)
    }
}

impl Error {
    pub fn message(&self) -> String {
        format!("{self:?}")
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
