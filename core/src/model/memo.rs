//! [`Memo`]: values computed from shared objects, kept by the identity of
//! the object (its `Arc`), not by its contents. Snapshots of one source
//! share every unchanged object with the last one, so whatever was
//! computed from an object (its verdict-cache digest, its validation
//! findings) is still right for the same `Arc` and is looked up in one
//! hash, without comparing or serializing the object. Owns only the map;
//! never decides when a value stops being valid for reasons other than
//! the object (the caller says so, or clears it).

use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;

use super::Object;

/// Values by shared object, kept across passes over snapshots: a pass
/// [`Memo::visit`]s each object of a snapshot, and [`Memo::sweep`] then
/// forgets the objects it did not visit. Keyed by the object's address:
/// each entry holds its object, so that address cannot be reused by
/// another one while the entry exists, and an address found here is this
/// object's. (Addresses are not chosen by anyone sending objects, so the
/// map uses a fast hash.)
#[derive(Clone)]
pub struct Memo<T> {
    entries: HashMap<usize, Kept<T>, foldhash::fast::RandomState>,
    /// The pass in progress: the entries visited in it carry it.
    pass: u64,
}

#[derive(Clone)]
struct Kept<T> {
    /// Held so that its address stays its own.
    _object: Arc<Object>,
    value: T,
    pass: u64,
}

/// The key of `object`: its address.
fn at(object: &Arc<Object>) -> usize {
    Arc::as_ptr(object).addr()
}

impl<T> std::fmt::Debug for Memo<T> {
    /// The number of objects kept (not the objects).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("objects", &self.len())
            .finish()
    }
}

impl<T> Default for Memo<T> {
    fn default() -> Memo<T> {
        Memo {
            entries: HashMap::default(),
            pass: 0,
        }
    }
}

impl<T> Memo<T> {
    /// The value kept for this very object (not an equal copy), made by
    /// `make` and kept when there is none or `stale` says the kept one no
    /// longer holds; the object is visited in this pass.
    pub fn visit(
        &mut self,
        object: &Arc<Object>,
        stale: impl FnOnce(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> &T {
        let pass = self.pass;
        match self.entries.entry(at(object)) {
            Entry::Occupied(occupied) => {
                let kept = occupied.into_mut();
                if stale(&kept.value) {
                    kept.value = make();
                }
                kept.pass = pass;
                &kept.value
            }
            Entry::Vacant(vacant) => {
                let kept = vacant.insert(Kept {
                    _object: Arc::clone(object),
                    value: make(),
                    pass,
                });
                &kept.value
            }
        }
    }

    /// Ends a pass: forgets every object not visited since the last
    /// sweep (and releases it).
    pub fn sweep(&mut self) {
        let pass = self.pass;
        self.entries.retain(|_, kept| kept.pass == pass);
        self.pass += 1;
    }

    /// The value kept for this very object, if any.
    pub fn get(&self, object: &Arc<Object>) -> Option<&T> {
        self.entries.get(&at(object)).map(|kept| &kept.value)
    }

    /// Forgets every value (and releases the objects held).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Objects kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Namespace, ObjectMeta};

    fn namespace(name: &str) -> Arc<Object> {
        Arc::new(Object::Namespace(Namespace {
            metadata: ObjectMeta {
                name: name.into(),
                ..ObjectMeta::default()
            },
        }))
    }

    /// Looked up by identity: a value is found for the object it was
    /// kept for (and its clones of the `Arc`), never for an equal copy in
    /// another allocation; the memo never compares objects. A value said
    /// to be stale is made again. Mutation: keyed by the object's
    /// contents → fails.
    #[test]
    fn a_value_is_kept_for_the_object_itself_and_not_an_equal_copy() {
        let object = namespace("a");
        let copy = Arc::new((*object).clone());
        let mut memo = Memo::default();
        assert_eq!(*memo.visit(&object, |_| false, || 1), 1);
        assert_eq!(*memo.visit(&Arc::clone(&object), |_| false, || 9), 1);
        assert_eq!(memo.get(&copy), None);
        assert_eq!(*memo.visit(&copy, |_| false, || 2), 2);
        assert_eq!((memo.get(&object), memo.get(&copy)), (Some(&1), Some(&2)));
        assert_eq!(*memo.visit(&object, |kept| *kept == 1, || 3), 3);
        assert_eq!(memo.len(), 2);
    }

    /// A sweep forgets the objects the pass did not visit, and releases
    /// them; the memo holds the others (dropped everywhere else, an
    /// object's address is not reused while its value is kept).
    /// Mutation: a sweep keeping every entry → fails.
    #[test]
    fn a_sweep_forgets_and_releases_what_the_pass_did_not_visit() {
        let (kept, left) = (namespace("kept"), namespace("left"));
        let (weak_kept, weak_left) = (Arc::downgrade(&kept), Arc::downgrade(&left));
        let mut memo = Memo::default();
        memo.visit(&kept, |_| false, || ());
        memo.visit(&left, |_| false, || ());
        memo.sweep();
        memo.visit(&kept, |_| false, || ());
        drop((kept, left));
        assert!(weak_left.upgrade().is_some());
        memo.sweep();
        assert!(weak_left.upgrade().is_none());
        assert!(weak_kept.upgrade().is_some());
        assert_eq!(memo.len(), 1);
        memo.clear();
        assert!(weak_kept.upgrade().is_none());
        assert!(memo.is_empty());
    }
}
