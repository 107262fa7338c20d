//! Datum bytes to PostgreSQL's text output.
