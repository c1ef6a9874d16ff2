//! TODO: action (being written)
