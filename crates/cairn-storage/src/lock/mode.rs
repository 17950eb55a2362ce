//! Lock modes: the compatibility matrix and the supremum (join) used for
//! conversions. The tables themselves are drawn in the [module
//! docs](super); the code below is the single source of truth for them.

use std::fmt;

/// A lock mode, from weakest to strongest along the lattice
/// `IS < {IX, S} < SIX < X`, `IX < A < SIX` and `S < U < SIX` (`S` is
/// incomparable with `IX` and with `A`, and so is `U`).
///
/// The intention modes (`IS`, `IX`, `SIX`) go on coarse resources (the
/// volume, a group) to announce shared or exclusive locks below them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum LockMode {
    /// Intention shared: the owner will take `S` locks below this resource.
    IS,
    /// Intention exclusive: the owner will take `X` (or `S`) locks below.
    IX,
    /// Shared: read the whole resource.
    S,
    /// Shared + intention exclusive: read all, update some below.
    SIX,
    /// Exclusive: read and write the whole resource.
    X,
    /// Append: add to the object without reading it (an increment lock in
    /// the manner of Korth's and of escrow locking). Appends commute, so
    /// two appenders hold it at once; it conflicts with whatever reads or
    /// writes the object whole (`S`, `SIX`, `X`). Taken only on objects,
    /// where `IX` (compatible with the same modes) is never taken: on an
    /// object the two differ in what they allow, not in what they exclude.
    /// An appender that then reads the object holds `SIX` (`sup(A, S)`),
    /// which waits for every other appender.
    A,
    /// Update: read now, perhaps change later (Korth's update mode).
    /// Compatible with readers (`IS`, `S`) but not with another `U`, so two
    /// transactions that each read a page meaning to change it queue at
    /// the read instead of both holding `S` and deadlocking when both ask
    /// for `X`. Taken on B+-tree leaves by lookups for update
    /// (`Txn::tree_leaf_for_update`).
    U,
}

impl LockMode {
    /// All modes, in declaration order (the order of the tables).
    pub const ALL: [LockMode; 7] = [
        LockMode::IS,
        LockMode::IX,
        LockMode::S,
        LockMode::SIX,
        LockMode::X,
        LockMode::A,
        LockMode::U,
    ];

    fn index(self) -> usize {
        match self {
            LockMode::IS => 0,
            LockMode::IX => 1,
            LockMode::S => 2,
            LockMode::SIX => 3,
            LockMode::X => 4,
            LockMode::A => 5,
            LockMode::U => 6,
        }
    }

    /// Whether two owners may hold `self` and `other` on one resource at
    /// once. Symmetric.
    pub fn compatible(self, other: LockMode) -> bool {
        const Y: bool = true;
        const N: bool = false;
        // Rows and columns in the order of `LockMode::ALL`.
        const COMPAT: [[bool; 7]; 7] = [
            //  IS IX  S SIX X  A  U
            [Y, Y, Y, Y, N, Y, Y], // IS
            [Y, Y, N, N, N, Y, N], // IX
            [Y, N, Y, N, N, N, Y], // S
            [Y, N, N, N, N, N, N], // SIX
            [N, N, N, N, N, N, N], // X
            [Y, Y, N, N, N, Y, N], // A
            [Y, N, Y, N, N, N, N], // U
        ];
        COMPAT[self.index()][other.index()]
    }

    /// The least mode at least as strong as both (the join of the lattice):
    /// what an owner holding `self` holds after also asking for `other`.
    pub fn sup(self, other: LockMode) -> LockMode {
        use LockMode::{A, IS, IX, S, SIX, U, X};
        // A excludes exactly what IX excludes, so IX ⊔ A is A; A ⊔ S
        // excludes all but IS, as SIX does; so do U ⊔ IX and U ⊔ A.
        const SUP: [[LockMode; 7]; 7] = [
            //  IS   IX   S    SIX  X  A    U
            [IS, IX, S, SIX, X, A, U],         // IS
            [IX, IX, SIX, SIX, X, A, SIX],     // IX
            [S, SIX, S, SIX, X, SIX, U],       // S
            [SIX, SIX, SIX, SIX, X, SIX, SIX], // SIX
            [X, X, X, X, X, X, X],             // X
            [A, A, SIX, SIX, X, A, SIX],       // A
            [U, SIX, U, SIX, X, SIX, U],       // U
        ];
        SUP[self.index()][other.index()]
    }

    /// Whether holding `self` already grants everything `other` would
    /// (`sup(self, other) == self`).
    pub fn covers(self, other: LockMode) -> bool {
        self.sup(other) == self
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
