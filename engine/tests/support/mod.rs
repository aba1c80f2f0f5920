//! Test support shared by the engine's test binaries: fresh databases and fixtures.

#![allow(dead_code)]

pub mod fixtures;
