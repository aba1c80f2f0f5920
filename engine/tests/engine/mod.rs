pub mod claiming;
pub mod outcomes;
pub mod watching;
