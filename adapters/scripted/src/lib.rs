//! The scripted adapter. Nothing is built here yet: see the project's issues.
