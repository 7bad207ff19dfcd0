//! Reports, comparisons and card fit: the decision side of the guide.

pub mod compare;
pub mod document;
pub mod fiche;
pub mod inputs;
