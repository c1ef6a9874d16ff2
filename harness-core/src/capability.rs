//! TODO: capability (being written)
