//! TODO: lifecycle (being written)
