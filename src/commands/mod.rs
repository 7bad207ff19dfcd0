//! One function per subcommand: turn validated arguments into work, and write the output.

pub mod cards;
pub mod compare;
pub mod environment;
pub mod estimate;
pub mod explain;
pub mod measure;
pub mod predict;
pub mod report;
pub mod sweep;
