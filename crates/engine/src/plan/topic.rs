//! [`Topic`]: a topic name shared by every key and range that names it.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A topic name. Cloning one shares it (a reference count, no copy), so that the
/// per-partition keys and ranges a batch builds ([`TopicPartition`](super::TopicPartition),
/// [`OffsetRange`](super::OffsetRange)) cost no allocation for their topic. It reads as a
/// `str` (`Deref`, `Borrow<str>`, `AsRef<str>`), compares, orders and hashes as its text, and
/// converts from `&str` and `String` (one allocation), from and into `Arc<str>` (shared, no
/// allocation: a Fetch answer's topic names) and into `String`.
#[derive(Clone, Default)]
pub struct Topic(Arc<str>);

// Keys of one topic share its name (cloned from one `Topic`), so most comparisons in the
// per-partition maps compare a name with itself: the pointer says so without reading it.
impl PartialEq for Topic {
    fn eq(&self, other: &Topic) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Topic {}

impl Ord for Topic {
    fn cmp(&self, other: &Topic) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            std::cmp::Ordering::Equal
        } else {
            self.0.cmp(&other.0)
        }
    }
}

// As its text, so that it agrees with `Eq` (equal names hash alike wherever they live) and
// with `Borrow<str>` lookups.
impl std::hash::Hash for Topic {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialOrd for Topic {
    fn partial_cmp(&self, other: &Topic) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Topic {
    /// A topic named `name`.
    pub fn new(name: &str) -> Topic {
        Topic(Arc::from(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Topic {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Topic {
    fn from(s: &str) -> Topic {
        Topic::new(s)
    }
}

impl From<&String> for Topic {
    fn from(s: &String) -> Topic {
        Topic::new(s)
    }
}

impl From<String> for Topic {
    fn from(s: String) -> Topic {
        Topic(Arc::from(s))
    }
}

/// Shares the name (a Fetch answer's topic, `kdirect_proto::api::fetch::FetchedPartition`).
impl From<Arc<str>> for Topic {
    fn from(s: Arc<str>) -> Topic {
        Topic(s)
    }
}

impl From<&Arc<str>> for Topic {
    fn from(s: &Arc<str>) -> Topic {
        Topic(Arc::clone(s))
    }
}

/// Shares the name, as an `Arc<str>` (what a Fetch request's names map holds).
impl From<&Topic> for Arc<str> {
    fn from(t: &Topic) -> Arc<str> {
        Arc::clone(&t.0)
    }
}

impl From<&Topic> for Topic {
    fn from(t: &Topic) -> Topic {
        t.clone()
    }
}

impl From<Topic> for String {
    fn from(t: Topic) -> String {
        t.0.as_ref().to_owned()
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Arc<str>> for Topic {
    fn eq(&self, other: &Arc<str>) -> bool {
        Arc::ptr_eq(&self.0, other) || *self.0 == **other
    }
}

impl PartialEq<String> for Topic {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Topic> for str {
    fn eq(&self, other: &Topic) -> bool {
        *self == *other.0
    }
}

impl PartialEq<Topic> for &str {
    fn eq(&self, other: &Topic) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Topic> for String {
    fn eq(&self, other: &Topic) -> bool {
        **self == *other.0
    }
}

/// Topic names already seen, handed out shared: [`Topics::get`] allocates a name the first
/// time only, so that keys built per partition per batch from a broker's answer (whose names
/// are `String`s) share one allocation per topic.
#[derive(Debug, Default, Clone)]
pub struct Topics(std::collections::HashSet<Topic>);

impl Topics {
    /// The shared `name`.
    pub fn get(&mut self, name: &str) -> Topic {
        if let Some(t) = self.0.get(name) {
            return t.clone();
        }
        let t = Topic::new(name);
        self.0.insert(t.clone());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    #[test]
    fn reads_compares_orders_and_hashes_as_its_text() {
        let t = Topic::from("events");
        assert_eq!(t, "events");
        assert_eq!("events", t);
        assert_eq!(t, String::from("events"));
        assert_eq!(t.len(), 6);
        assert_eq!(format!("{t} {t:?}"), "events \"events\"");
        let (a, b) = (Topic::from("a"), Topic::from("b"));
        assert!(a < b);
        let mut m: HashMap<Topic, i32> = HashMap::new();
        m.insert(t.clone(), 1);
        assert_eq!(m.get("events"), Some(&1));
        let b: BTreeMap<Topic, i32> = BTreeMap::from([(t.clone(), 2)]);
        assert_eq!(b.get("events"), Some(&2));
        assert_eq!(String::from(t), "events");
    }

    #[test]
    fn topics_hands_out_one_name_per_topic() {
        let mut topics = Topics::default();
        let a = topics.get("events");
        let b = topics.get(&String::from("events"));
        assert!(std::ptr::eq(a.as_str(), b.as_str()));
        assert_ne!(topics.get("other"), a);
    }

    #[test]
    fn shared_and_separate_names_compare_alike() {
        let t = Topic::from("events");
        let (same, twin, other) = (t.clone(), Topic::from("events"), Topic::from("evente"));
        assert_eq!(t, same);
        assert_eq!(t, twin);
        assert_eq!(t.cmp(&twin), std::cmp::Ordering::Equal);
        assert_eq!(t.cmp(&other), std::cmp::Ordering::Greater);
        assert_eq!(other.cmp(&t), std::cmp::Ordering::Less);
        assert_ne!(t, other);
    }

    #[test]
    fn a_clone_shares_the_name() {
        let t = Topic::from("events");
        let u = t.clone();
        assert!(std::ptr::eq(t.as_str(), u.as_str()));
    }
}
