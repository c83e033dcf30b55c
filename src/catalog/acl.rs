//! Who owns a relation and who was granted what on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A privilege on a relation, as `GRANT` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
}

impl Privilege {
    pub const ALL: [Privilege; 4] = [
        Privilege::Insert,
        Privilege::Select,
        Privilege::Update,
        Privilege::Delete,
    ];

    fn bit(self) -> u8 {
        match self {
            Privilege::Select => 1,
            Privilege::Insert => 2,
            Privilege::Update => 4,
            Privilege::Delete => 8,
        }
    }

    /// Its letter in PostgreSQL's `aclitem` text (`relacl`, `\dp`).
    fn letter(self) -> char {
        match self {
            Privilege::Select => 'r',
            Privilege::Insert => 'a',
            Privilege::Update => 'w',
            Privilege::Delete => 'd',
        }
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

    /// The owner holds every privilege; others what they were granted.
    pub fn allows(&self, role: &str, privilege: Privilege) -> bool {
        self.owner.as_deref() == Some(role)
            || self
                .grants
                .get(role)
                .is_some_and(|bits| bits & privilege.bit() != 0)
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

    /// PostgreSQL's `aclitem` texts: `role=arwd/grantor`, the owner's
    /// first. `None` while nothing was granted, as PostgreSQL shows the
    /// default privileges.
    pub fn items(&self, bootstrap: &str) -> Option<Vec<String>> {
        if self.grants.is_empty() {
            return None;
        }
        let owner = self.owner.as_deref().unwrap_or(bootstrap);
        let letters = |bits: u8| -> String {
            Privilege::ALL
                .iter()
                .filter(|p| bits & p.bit() != 0)
                .map(|p| p.letter())
                .collect()
        };
        let mut items = vec![format!("{owner}={}/{owner}", letters(0x0f))];
        items.extend(
            self.grants
                .iter()
                .filter(|(role, _)| role.as_str() != owner)
                .map(|(role, bits)| format!("{role}={}/{owner}", letters(*bits))),
        );
        Some(items)
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
}
