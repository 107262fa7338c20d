#![allow(unreachable_pub)]

//! Integration tests against the private PostgreSQL clusters started by
//! `scripts/test.sh`. Each test works in a database of its own.

mod support;

mod apply_rule;
mod archiver;
mod bad_input;
mod boundary;
mod chunked;
mod drift;
mod evaluate;
mod formats;
mod gate;
mod journal;
mod layouts;
mod operator;
mod ops;
mod oracle;
mod output;
mod privileges;
mod regress;
mod replay;
mod resume;
mod serve;
mod snapshot;
mod summaries;
mod swap;
mod toast;
mod torture;
mod transform;
mod verify;
