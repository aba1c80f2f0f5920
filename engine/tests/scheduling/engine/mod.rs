pub mod claiming;
pub mod misfire;
pub mod outcomes;
pub mod watching;
