//! Component bytes, task and condition components alike: the one store of them, with how many
//! held groups use each (a run-time environment's definition keeps its condition's bytes too).

use super::*;

/// A component's bytes (shared by every frame that sends them) and its users among held groups.
struct Component {
    bytes: Arc<[u8]>,
    groups: usize,
}

#[derive(Default)]
pub struct Components {
    known: HashMap<ComponentHash, Component>,
}

impl Components {
    pub fn get(&self, hash: &ComponentHash) -> Option<&Arc<[u8]>> {
        self.known.get(hash).map(|c| &c.bytes)
    }

    pub fn contains_key(&self, hash: &ComponentHash) -> bool {
        self.known.contains_key(hash)
    }

    /// How many held groups use it (`None`: unknown).
    pub fn users(&self, hash: &ComponentHash) -> Option<usize> {
        self.known.get(hash).map(|c| c.groups)
    }

    /// Known from now on (with no user yet); whether it is new. One no group ever uses stays
    /// (as before: a later submission may name it without bringing it again).
    fn add(&mut self, hash: ComponentHash, bytes: Arc<[u8]>) -> bool {
        match self.known.entry(hash) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Component { bytes, groups: 0 });
                true
            }
        }
    }

    pub(super) fn use_one(&mut self, hash: &ComponentHash) {
        if let Some(c) = self.known.get_mut(hash) {
            c.groups += 1;
        }
    }

    /// A group that used it is gone: whether no held group uses it any more (its bytes go too,
    /// unless `keep`: a run-time environment's condition).
    fn release_one(&mut self, hash: &ComponentHash, keep: bool) -> bool {
        let Some(c) = self.known.get_mut(hash) else {
            return false;
        };
        c.groups = c.groups.saturating_sub(1);
        if c.groups > 0 {
            return false;
        }
        if !keep {
            self.known.remove(hash);
        }
        true
    }
}

impl Tasks {
    /// A component arrived (with a submission, or an environment's registration); whether it is
    /// new. It stays known until the last held group that uses it is dropped and no run-time
    /// environment's definition uses it.
    pub fn add_component(&mut self, hash: ComponentHash, bytes: Arc<[u8]>) -> bool {
        self.components.add(hash, bytes)
    }

    /// Every known component, with its bytes.
    pub fn components(&self) -> &Components {
        &self.components
    }

    /// A group using `hash` was dropped: whether no held group uses it any more.
    pub(super) fn release_component(&mut self, hash: &ComponentHash) -> bool {
        let keep = self.environments.uses_component(hash);
        self.components.release_one(hash, keep)
    }

    /// A run-time environment's definition no longer uses `hash` (removed or replaced): its
    /// bytes go unless a held group or another definition uses it.
    pub(super) fn condition_released(&mut self, hash: &ComponentHash) {
        if !self.environments.uses_component(hash) && self.components.users(hash) == Some(0) {
            self.components.known.remove(hash);
        }
    }
}

impl Tasks {
    /// The components' and environments' stores agree with their users: each component's
    /// count is the held groups that use it, every definition's condition is known, and every
    /// name a worker answered on is known.
    pub(super) fn check_stores(&self) -> Result<(), String> {
        let mut users: HashMap<ComponentHash, usize> = HashMap::default();
        for group in self.groups.values() {
            if let TaskKind::Wasm { component } = &group.spec.kind {
                *users.entry(*component).or_default() += 1;
            }
        }
        for (hash, c) in &self.components.known {
            let used = users.get(hash).copied().unwrap_or(0);
            if used != c.groups {
                return Err(format!(
                    "component {}: {used} held groups use it, counted {}",
                    hex::encode(hash),
                    c.groups
                ));
            }
        }
        if let Some(def) = self
            .environments
            .definitions()
            .find(|def| !self.components.contains_key(&def.component))
        {
            return Err(format!(
                "environment `{}`: its condition's bytes are gone",
                def.name
            ));
        }
        for (id, worker) in &self.workers {
            if let Some(name) = worker
                .verdicts
                .keys()
                .chain(&worker.environments)
                .find(|name| !self.environments.contains_key(name))
            {
                return Err(format!(
                    "worker {id} answered on `{name}`, which is not known"
                ));
            }
        }
        Ok(())
    }
}
