//! Lock modes: the compatibility matrix and the supremum (join) used for
//! conversions. The tables themselves are drawn in the [module
//! docs](super); the code below is the single source of truth for them.

use std::fmt;

/// A lock mode, from weakest to strongest along the lattice
/// `IS < {IX, S} < SIX < X` (`IX` and `S` are incomparable).
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
}

impl LockMode {
    /// All modes, in declaration order (the order of the tables).
    pub const ALL: [LockMode; 5] = [LockMode::IS, LockMode::IX, LockMode::S, LockMode::SIX, LockMode::X];

    fn index(self) -> usize {
        match self {
            LockMode::IS => 0,
            LockMode::IX => 1,
            LockMode::S => 2,
            LockMode::SIX => 3,
            LockMode::X => 4,
        }
    }

    /// Whether two owners may hold `self` and `other` on one resource at
    /// once. Symmetric.
    pub fn compatible(self, other: LockMode) -> bool {
        const Y: bool = true;
        const N: bool = false;
        // Rows and columns in the order of `LockMode::ALL`.
        const COMPAT: [[bool; 5]; 5] = [
            //  IS IX  S SIX X
            [Y, Y, Y, Y, N], // IS
            [Y, Y, N, N, N], // IX
            [Y, N, Y, N, N], // S
            [Y, N, N, N, N], // SIX
            [N, N, N, N, N], // X
        ];
        COMPAT[self.index()][other.index()]
    }

    /// The least mode at least as strong as both (the join of the lattice):
    /// what an owner holding `self` holds after also asking for `other`.
    pub fn sup(self, other: LockMode) -> LockMode {
        use LockMode::{IS, IX, S, SIX, X};
        const SUP: [[LockMode; 5]; 5] = [
            //  IS   IX   S    SIX  X
            [IS, IX, S, SIX, X],     // IS
            [IX, IX, SIX, SIX, X],   // IX
            [S, SIX, S, SIX, X],     // S
            [SIX, SIX, SIX, SIX, X], // SIX
            [X, X, X, X, X],         // X
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
