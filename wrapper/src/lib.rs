//! MTHPT executor wrapper.
//!
//! Business applications embed this crate to receive runs from MTHPT engine nodes. It holds the
//! wire protocol shared with the engine (module `protocol`) and depends on no database crate.
