//! Sets of negotiable identifiers (hash functions, DH groups): what `nvmf_set_config`
//! `dhchap_digests` and `dhchap_dhgroups` allow.

use core::fmt;
use core::marker::PhantomData;

/// An identifier DH-HMAC-CHAP negotiates: a hash function or a DH group.
pub trait AuthId: Copy + PartialEq + 'static {
    /// Every value, weakest first.
    const ALL: &'static [Self];
    /// The wire identifier (below 8).
    fn id(self) -> u8;
    /// SPDK's name.
    fn name(self) -> &'static str;
}

/// A set of [`AuthId`]s.
pub struct IdSet<T> {
    bits: u8,
    kind: PhantomData<T>,
}

impl<T: AuthId> IdSet<T> {
    /// No member.
    pub const EMPTY: IdSet<T> = IdSet {
        bits: 0,
        kind: PhantomData,
    };

    /// Every value (SPDK's default).
    pub fn all() -> IdSet<T> {
        IdSet::of(T::ALL)
    }

    /// The set of `members`.
    pub fn of(members: &[T]) -> IdSet<T> {
        IdSet {
            bits: members.iter().fold(0, |m, x| m | 1 << x.id()),
            kind: PhantomData,
        }
    }

    /// Whether `x` is in the set.
    pub fn contains(self, x: T) -> bool {
        self.bits & 1 << x.id() != 0
    }

    /// The members, weakest first.
    pub fn iter(self) -> impl DoubleEndedIterator<Item = T> {
        T::ALL.iter().copied().filter(move |x| self.contains(*x))
    }
}

impl<T> Clone for IdSet<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for IdSet<T> {}

impl<T> PartialEq for IdSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits
    }
}

impl<T> Eq for IdSet<T> {}

impl<T: AuthId> fmt::Debug for IdSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(T::name)).finish()
    }
}
