//! Tower layers for harness executions. Nothing is built here yet: see the project's issues.
