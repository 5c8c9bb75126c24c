"""Phase 3 of an index run (indexer.IndexRun): hash what is new or changed; content already known keeps its vector.

Moves, renames, copies and touched files get the stored vector; a `--rebuild` also takes the old database's
(rebuild.OldVectors). Every decision is O(1): vanished rows by hash from memory, a donor vector by an index lookup.
"""
from __future__ import annotations

from imgtxt.model.images import in_order

from .photo_work import Work, hash_work
from .rebuild import OldVectors


class ContentReuse:
    """The methods of IndexRun that reuse vectors by content (its store, writes, summary and rows)."""

    old_vectors: OldVectors | None = None   # a rebuild: the old database's vectors by content hash

    def reuse_known_content(self, work: list[Work], vanished: set[str]) -> tuple[list[Work], list[Work]]:
        """Moves, renames, copies and touched files get the stored vector. Returns the photos to embed and the
        copies of those (same bytes, found in this run), which get the vector once it is stored.

        Every decision is O(1): vanished rows by hash from memory, a donor vector by an index lookup."""
        known_hashes = self.store.hashes_with_vectors(self.model_id)
        vanished_by_hash: dict[str, list[str]] = {}
        for key in sorted(vanished):
            row = self.rows[key]
            if row["model_id"] == self.model_id:
                vanished_by_hash.setdefault(row["hash"], []).append(key)
        to_embed: list[Work] = []
        copies: list[Work] = []
        first_of_hash: set[str] = set()
        for w, _ in in_order(hash_work, work, self.workers, 64):
            if w.error:
                self.skip(w, w.error)
            elif w.hash not in known_hashes:
                if not self.reuse_old_vector(w):
                    (copies if w.hash in first_of_hash else to_embed).append(w)
                    first_of_hash.add(w.hash)
            elif w.existing is not None and w.existing["hash"] == w.hash and w.existing["model_id"] == self.model_id:
                self.summary.unchanged += 1  # touched, same bytes: just note the new mtime
                self.writes.append(lambda w=w: self.store.move_photo(w.existing["id"], w.path, w.size, w.mtime_ns,
                                                                     w.stamp))
            else:
                candidates = vanished_by_hash.get(w.hash, [])
                while candidates and candidates[-1] not in vanished:
                    candidates.pop()
                if candidates:
                    old = candidates.pop()
                    vanished.discard(old)
                    self.summary.moved += 1
                    self.writes.append(
                        lambda w=w, i=self.rows[old]["id"]: self.store.move_photo(i, w.path, w.size, w.mtime_ns,
                                                                                  w.stamp))
                elif not self.reuse_vector(w):
                    to_embed.append(w)   # its donor went since the membership test: embedded, never dropped
            if len(self.writes) >= 256:
                self.commit()
        self.commit()
        return to_embed, copies

    def reuse_vector(self, w: Work) -> bool:
        donor = self.store.vector_for_hash(w.hash, self.model_id)
        if donor is None:
            return False
        self.count_added_or_updated(w)
        self.writes.append(lambda w=w, d=donor: self.store.put_photo(
            w.path, w.size, w.mtime_ns, w.hash, d["width"], d["height"], d["embedding"], self.model_id, w.stamp))
        return True

    def reuse_old_vector(self, w: Work) -> bool:
        """A rebuild: the old database's vector of these bytes, if it has a usable one."""
        donor = self.old_vectors.vector(w.hash) if self.old_vectors is not None else None
        if donor is None:
            return False
        self.old_vectors.reused += 1
        self.count_added_or_updated(w)
        self.writes.append(lambda w=w, d=donor: self.store.put_photo(
            w.path, w.size, w.mtime_ns, w.hash, d["width"], d["height"], d["embedding"], self.model_id, w.stamp))
        return True

    def place_copies(self, copies: list[Work]) -> None:
        """Copies of a photo embedded in this run share its vector; if the first copy could not be decoded,
        the others are tried on their own."""
        left = [w for w in copies if not self.reuse_vector(w)]
        self.commit()
        if left:
            self.embed(left)
