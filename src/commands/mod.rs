//! One function per subcommand: turn validated arguments into work, and write the output.

pub mod environment;
pub mod estimate;
pub mod measure;
pub mod sweep;
