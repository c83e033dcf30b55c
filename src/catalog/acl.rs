//! Who owns a relation or the schema and who was granted what on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The grantee `GRANT ... TO PUBLIC` names: every role, present and
/// future. No role may take the name (`CREATE ROLE public` is 42939).
pub const PUBLIC: &str = "public";

/// A privilege on a relation or a schema, as `GRANT` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
    /// Look up objects in the schema.
    Usage,
    /// Create objects in the schema.
    Create,
}

impl Privilege {
    /// What `ALL` grants on a relation.
    pub const ALL: [Privilege; 4] = [
        Privilege::Insert,
        Privilege::Select,
        Privilege::Update,
        Privilege::Delete,
    ];

    /// What `ALL` grants on a schema.
    pub const ALL_ON_SCHEMA: [Privilege; 2] = [Privilege::Usage, Privilege::Create];

    /// PostgreSQL's order of letters in an `aclitem`.
    const ORDER: [Privilege; 6] = [
        Privilege::Insert,
        Privilege::Select,
        Privilege::Update,
        Privilege::Delete,
        Privilege::Usage,
        Privilege::Create,
    ];

    fn bit(self) -> u8 {
        match self {
            Privilege::Select => 1,
            Privilege::Insert => 2,
            Privilege::Update => 4,
            Privilege::Delete => 8,
            Privilege::Usage => 16,
            Privilege::Create => 32,
        }
    }

    /// Its letter in PostgreSQL's `aclitem` text (`relacl`, `\dp`).
    fn letter(self) -> char {
        match self {
            Privilege::Select => 'r',
            Privilege::Insert => 'a',
            Privilege::Update => 'w',
            Privilege::Delete => 'd',
            Privilege::Usage => 'U',
            Privilege::Create => 'C',
        }
    }

    /// Its keyword, for "invalid privilege type X for schema".
    pub fn keyword(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Usage => "USAGE",
            Privilege::Create => "CREATE",
        }
    }

    pub fn on_schema(self) -> bool {
        Privilege::ALL_ON_SCHEMA.contains(&self)
    }
}

/// A relation's owner and grants. A relation without one (made before
/// owners were kept) belongs to the bootstrap superuser.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acl {
    pub owner: Option<String>,
    /// Privileges by role, as bits.
    #[serde(default)]
    pub grants: BTreeMap<String, u8>,
}

impl Acl {
    pub fn owned_by(owner: &str) -> Acl {
        Acl {
            owner: Some(owner.to_string()),
            grants: BTreeMap::new(),
        }
    }

    /// The owner holds every privilege; others what they or PUBLIC were
    /// granted.
    pub fn allows(&self, role: &str, privilege: Privilege) -> bool {
        let granted = |grantee: &str| {
            self.grants
                .get(grantee)
                .is_some_and(|bits| bits & privilege.bit() != 0)
        };
        self.owner.as_deref() == Some(role) || granted(role) || granted(PUBLIC)
    }

    pub fn grant(&mut self, role: &str, privileges: &[Privilege]) {
        let bits = self.grants.entry(role.to_string()).or_default();
        for p in privileges {
            *bits |= p.bit();
        }
    }

    pub fn revoke(&mut self, role: &str, privileges: &[Privilege]) {
        if let Some(bits) = self.grants.get_mut(role) {
            for p in privileges {
                *bits &= !p.bit();
            }
            if *bits == 0 {
                self.grants.remove(role);
            }
        }
    }

    /// A relation's `aclitem` texts: `role=arwd/grantor`, the owner's
    /// first, PUBLIC's as `=r/grantor`. `None` while nothing was granted,
    /// as PostgreSQL shows the default privileges.
    pub fn items(&self, bootstrap: &str) -> Option<Vec<String>> {
        if self.grants.is_empty() {
            return None;
        }
        Some(self.items_with(bootstrap, &Privilege::ALL))
    }

    /// The `aclitem` texts with the owner holding `owned`.
    pub fn items_with(&self, bootstrap: &str, owned: &[Privilege]) -> Vec<String> {
        let owner = self.owner.as_deref().unwrap_or(bootstrap);
        let letters = |bits: u8| -> String {
            Privilege::ORDER
                .iter()
                .filter(|p| bits & p.bit() != 0)
                .map(|p| p.letter())
                .collect()
        };
        let owner_bits = owned.iter().fold(0, |bits, p| bits | p.bit());
        let mut items = vec![format!("{owner}={}/{owner}", letters(owner_bits))];
        // PostgreSQL lists PUBLIC's item right after the owner's.
        if let Some(bits) = self.grants.get(PUBLIC) {
            items.push(format!("={}/{owner}", letters(*bits)));
        }
        items.extend(
            self.grants
                .iter()
                .filter(|(role, _)| role.as_str() != owner && role.as_str() != PUBLIC)
                .map(|(role, bits)| format!("{role}={}/{owner}", letters(*bits))),
        );
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_and_revokes_show_as_postgresql_does() {
        let mut acl = Acl::owned_by("ann");
        assert!(acl.allows("ann", Privilege::Delete));
        assert!(!acl.allows("bob", Privilege::Select));
        assert_eq!(acl.items("weir"), None);
        acl.grant("bob", &[Privilege::Select, Privilege::Insert]);
        assert!(acl.allows("bob", Privilege::Select));
        assert!(!acl.allows("bob", Privilege::Update));
        assert_eq!(
            acl.items("weir"),
            Some(vec!["ann=arwd/ann".to_string(), "bob=ar/ann".to_string()])
        );
        acl.revoke("bob", &Privilege::ALL);
        assert!(!acl.allows("bob", Privilege::Select));
        assert!(acl.grants.is_empty());
    }

    #[test]
    fn public_grants_reach_every_role() {
        let mut acl = Acl::owned_by("ann");
        acl.grant(PUBLIC, &[Privilege::Select]);
        assert!(acl.allows("bob", Privilege::Select));
        assert!(!acl.allows("bob", Privilege::Insert));
        assert_eq!(
            acl.items("weir"),
            Some(vec!["ann=arwd/ann".to_string(), "=r/ann".to_string()])
        );
        let mut schema = Acl::default();
        schema.grant(PUBLIC, &[Privilege::Usage]);
        schema.grant("bob", &[Privilege::Create]);
        assert_eq!(
            schema.items_with("weir", &Privilege::ALL_ON_SCHEMA),
            ["weir=UC/weir", "=U/weir", "bob=C/weir"]
        );
    }
}
