//! [`Memo`]: values computed from shared objects, kept by the identity of
//! the object (its `Arc`), not by its contents. Snapshots of one source
//! share every unchanged object with the last one, so whatever was
//! computed from an object (its verdict-cache digest, its validation
//! findings) is still right for the same `Arc` and is looked up in one
//! hash, without comparing or serializing the object. Owns only the map;
//! never decides when a value stops being valid for reasons other than
//! the object (the caller clears it).

use std::collections::HashMap;
use std::sync::Arc;

use super::Object;

/// Values by shared object, keyed by the object's address. Each entry
/// holds its object, so that address cannot be reused by another one
/// while the entry exists: an address found here is this object's.
#[derive(Clone)]
pub struct Memo<T> {
    entries: HashMap<usize, (Arc<Object>, T)>,
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
            entries: HashMap::new(),
        }
    }
}

impl<T> Memo<T> {
    /// An empty memo with room for `capacity` objects.
    pub fn with_capacity(capacity: usize) -> Memo<T> {
        Memo {
            entries: HashMap::with_capacity(capacity),
        }
    }

    /// The value kept for this very object (not an equal copy).
    pub fn get(&self, object: &Arc<Object>) -> Option<&T> {
        self.entries.get(&at(object)).map(|(_, value)| value)
    }

    /// The value kept for this very object, taken out.
    pub fn take(&mut self, object: &Arc<Object>) -> Option<T> {
        self.entries.remove(&at(object)).map(|(_, value)| value)
    }

    /// Keeps `value` for `object` (replacing what was kept for it).
    pub fn insert(&mut self, object: &Arc<Object>, value: T) {
        self.entries.insert(at(object), (Arc::clone(object), value));
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
    /// another allocation; the memo never compares objects. Mutation:
    /// keyed by the object's contents → fails.
    #[test]
    fn a_value_is_kept_for_the_object_itself_and_not_an_equal_copy() {
        let object = namespace("a");
        let copy = Arc::new((*object).clone());
        let mut memo = Memo::default();
        memo.insert(&object, 1);
        assert_eq!(memo.get(&object), Some(&1));
        assert_eq!(memo.get(&Arc::clone(&object)), Some(&1));
        assert_eq!(memo.get(&copy), None);
        assert_eq!(memo.take(&copy), None);
        assert_eq!(memo.take(&object), Some(1));
        assert!(memo.is_empty());
    }

    /// The memo holds its objects: dropped everywhere else, an object's
    /// address is not reused while its value is kept.
    #[test]
    fn a_kept_object_stays_alive_until_it_is_forgotten() {
        let object = namespace("a");
        let weak = Arc::downgrade(&object);
        let mut memo = Memo::default();
        memo.insert(&object, ());
        drop(object);
        assert!(weak.upgrade().is_some());
        memo.clear();
        assert!(weak.upgrade().is_none());
        assert_eq!(memo.len(), 0);
    }
}
