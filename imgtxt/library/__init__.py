"""The photo library layer: a folder of photos made searchable, and the `Library` API over it.

Owns scanning folders (scan), the SQLite metadata and its numbered migrations (store, migrations,
photo_paths), the crash-safe incremental indexer (indexer, index_folder, photo_work, ray_index), the vector
files and their search (vector_build, vector_index), text and photo queries (query), what people remember of a
photo and searches by it (photo_facts, places, name_words, query_filters, blended_search, remembered_search),
duplicates, thumbnails, the result dataclasses (results) and `Library` itself (photo_library, library_extras,
database_errors).

May import: imgtxt.model and the shared modules. Never imports imgtxt.research, imgtxt.web or imgtxt.cli.
"""
