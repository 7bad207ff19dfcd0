//! The reserve: a margin the user states. Always *assumed*: it is a choice, not a measurement.

use super::{Kind, Term, TermId};
use crate::units::Bytes;

/// A stated reserve and how it was written (`--reserve-gib 4`, `--reserve 4.5GB`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserve {
    pub bytes: Bytes,
    pub stated_as: String,
}

impl Reserve {
    pub fn term(&self) -> Term {
        Term::new(
            TermId::Reserve,
            self.bytes,
            Kind::Assumed,
            format!("stated by {}", self.stated_as),
        )
        .input("stated_as", self.stated_as.clone())
    }
}
