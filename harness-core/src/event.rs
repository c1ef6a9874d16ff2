//! TODO: event (being written)
