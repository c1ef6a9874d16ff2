//! TODO: artifact (being written)
