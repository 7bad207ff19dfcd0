//! The one catalog of what the fiche says, in English and in French. Each wording is defined once,
//! both languages side by side, so rewording one shows the other beside it, and French is never
//! made by rewriting English. Numbers, sizes and dates inside a message are written by
//! `report::format`.
//!
//! * Fixed words: one enum per section of the fiche (`gap.rs` for `fiche/gap.rs`, …; `common.rs`
//!   for words several share), said with `Style::say` (`lang.say(GapText::PostMortemHeading)`).
//! * Messages with parameters, worded from the domain's values: estimate terms, ledger lines and
//!   checkpoints (`names`, keyed on `TermId`, `LineId`, `Checkpoint`); the allocator's
//!   `Diagnostic`s, the card's `CapacityName`s and the out-of-memory post-mortem (`ledger`); and
//!   a few functions beside their section's words (`ranks`, `observed`, `assumed`). Their English
//!   is the words the files and the terminal already hold.

/// A fixed wording in English and in French (made by `catalog!`).
pub trait Message: Copy {
    /// `[english, french]`.
    fn words(self) -> [&'static str; 2];
}

/// An enum of fixed messages, each written `Variant => "English", "French";`, with its
/// [`Message`] implementation and, in tests, `ALL`: every variant.
macro_rules! catalog {
    ($(#[$meta:meta])* pub enum $name:ident { $($variant:ident => $en:literal, $fr:literal;)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($variant,)*
        }

        #[cfg(test)]
        impl $name {
            /// Every message of this enum.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
        }

        impl super::Message for $name {
            fn words(self) -> [&'static str; 2] {
                match self {
                    $($name::$variant => [$en, $fr],)*
                }
            }
        }
    };
}

pub mod assumed;
pub mod calculated;
pub mod common;
pub mod export;
pub mod fiche;
pub mod gap;
pub mod identity;
pub mod ledger;
pub mod names;
pub mod observed;
pub mod prediction_fiche;
pub mod ranks;
pub mod series;
pub mod snapshot;
pub mod timeline;
pub mod verdict;

#[cfg(test)]
mod tests {
    use super::Message;
    use std::collections::BTreeMap;

    fn all() -> Vec<(String, [&'static str; 2])> {
        fn of<M: Message + std::fmt::Debug>(all: &[M]) -> Vec<(String, [&'static str; 2])> {
            all.iter().map(|m| (format!("{m:?}"), m.words())).collect()
        }
        [
            of(super::assumed::AssumedText::ALL),
            of(super::calculated::CalculatedText::ALL),
            of(super::common::CommonText::ALL),
            of(super::export::ExportText::ALL),
            of(super::fiche::FicheText::ALL),
            of(super::gap::GapText::ALL),
            of(super::identity::IdentityText::ALL),
            of(super::observed::ObservedText::ALL),
            of(super::prediction_fiche::PredictedText::ALL),
            of(super::ranks::RanksText::ALL),
            of(super::series::SeriesText::ALL),
            of(super::snapshot::SnapshotText::ALL),
            of(super::timeline::TimelineText::ALL),
            of(super::verdict::VerdictText::ALL),
        ]
        .concat()
    }

    /// Each wording is defined once: a pair used by two sections lives in `common`.
    #[test]
    fn each_pair_of_words_is_defined_once() {
        let mut seen = BTreeMap::new();
        for (name, words) in all() {
            if let Some(first) = seen.insert(words, name.clone()) {
                panic!("{name} repeats {first}: {words:?}");
            }
        }
    }

    /// Every message has both languages, and French keeps English's edges (a leading space, a
    /// trailing colon) so that the sentences built around it read the same in both.
    #[test]
    fn both_languages_are_written() {
        for (name, [en, fr]) in all() {
            assert!(!en.is_empty() && !fr.is_empty(), "{name}");
            assert_eq!(en.starts_with(' '), fr.starts_with(' '), "{name}");
            assert_eq!(en.ends_with(':'), fr.ends_with(':'), "{name}");
        }
    }
}
