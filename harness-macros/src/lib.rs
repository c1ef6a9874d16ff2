//! Derive macros for harness adapters. Nothing is built here yet: see the project's issues.
