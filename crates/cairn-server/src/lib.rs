//! The Cairn server (a later issue): sessions and the page, object, lock and log services over `cairn-net`, on top of `cairn-storage`.
