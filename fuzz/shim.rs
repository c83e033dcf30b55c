//! What the weir sources compiled here by path take from `crate::error`.

#![allow(dead_code)]

#[derive(Debug)]
pub enum Error {
    TooComplex(String),
    Corrupted(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
