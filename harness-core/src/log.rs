//! TODO: log (being written)
