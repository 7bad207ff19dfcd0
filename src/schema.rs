//! Every document iteragpu writes or reads, and the values they hold: the bottom layer.
//!
//! A measurement (`measure`), its worker's spec and events, a prediction (`prediction`), a series
//! (`series`), `load` (which reads any of them back) and `view` (a measurement or a prediction read
//! alike). Runners build these documents and presentation reads them; nothing here imports a
//! runner, the presentation or the commands.

pub mod alloc_conf;
pub mod check;
pub mod dimensions;
pub mod events;
pub mod failure;
pub mod fit;
pub mod history;
pub mod load;
pub mod measure;
pub mod nodes;
pub mod prediction;
pub mod run;
pub mod series;
pub mod spec;
pub mod target;
pub mod torchrun;
pub mod trace;
pub mod versions;
pub mod view;
