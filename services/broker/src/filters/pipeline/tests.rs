//! Unit tests of the pipeline language.
