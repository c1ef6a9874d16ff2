//! TODO: manifest (being written)
