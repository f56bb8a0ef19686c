"""The built-in default fact set, built offline from the PyPI packages `countryinfo` and `pycountry`.

Relations (Wikidata ids, LAMA-style templates):
- P36   capital              country -> capital city
- P1376 capital of           capital city -> country
- P30   continent            country -> continent (Africa, Asia, Europe, Oceania, North America,
                             South America; the UN region "Americas" is split with the
                             intermediate region: South America vs Caribbean / Central America
                             -> North America)
- P37   official language    country -> language (ISO 639 codes named with pycountry)
- P38   currency             country -> currency (ISO 4217 codes named with pycountry)
- P47   shares border with   country -> country (ISO alpha-3 border codes)

Ids: countries by ISO alpha-3 (`FRA`), cities `city:<name>`, languages `lang:<code>`,
currencies `cur:<code>`, continents `continent:<name>`. A city's id is its name, so that the
same surface form (Kingston: Jamaica and Norfolk Island; Jerusalem: Israel and Palestine) keeps
every correct country as a correct object. Cardinalities are those seen in the data.

Which entries count: one per current ISO 3166-1 alpha-3 code known to pycountry (249 countries
and territories), taking the entry countryinfo itself resolves for that code. Skipped, and counted
in `countryinfo_stats()`: entries without an ISO code (Scotland), with a retired code (Serbia
and Montenegro, Netherlands Antilles) or duplicating a code (Burma, Wales, ...); missing capitals
/ regions; language or currency codes pycountry does not know (retired currencies such as HRK,
BGN, VEF are skipped on purpose: those facts are out of date); ISO 4217 fund codes (USN, CHW, ...);
borders with codes that are not countries here (Kosovo). One known data error is corrected:
Serbia's language code `rs` (a country code) means `sr`. Order is deterministic: relations as
listed, facts by country name then object.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

from ..facts import Fact, FactSet, Relation
from ._common import check_relations, infer_cardinality

_TEMPLATES = {
    "P36": ("capital", "The capital of [X] is [Y] .", "capital city of a country"),
    "P1376": ("capital of", "[X] is the capital of [Y] .", "country whose capital this city is"),
    "P30": ("continent", "[X] is located in [Y] .", "continent of a country"),
    "P37": ("official language", "The official language of [X] is [Y] .", "official language(s) of a country"),
    "P38": ("currency", "The official currency of [X] is the [Y] .", "currency (currencies) used in a country"),
    "P47": ("shares border with", "[X] shares border with [Y] .", "countries sharing a land border"),
}
RELATION_IDS = tuple(_TEMPLATES)

_FUND_CURRENCIES = frozenset({"BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "USS", "UYI", "UYW", "XSU", "XUA", "XDR"})
_LANGUAGE_CODE_FIXES = {"rs": "sr"}
_AMERICAS = {
    "Northern America": "North America",
    "South America": "South America",
    "Caribbean": "North America",
    "Central America": "North America",
}


def _continent(entry: dict[str, Any]) -> str | None:
    region = (entry.get("region") or "").strip()
    if region in ("Africa", "Asia", "Europe", "Oceania"):
        return region
    if region == "Americas":
        sub = (entry.get("subregion") or "").strip()
        return _AMERICAS.get(sub) or _AMERICAS.get((entry.get("intermediateregion") or "").strip())
    return None


def _language_name(code: str) -> str | None:
    import pycountry

    code = _LANGUAGE_CODE_FIXES.get(code, code)
    lang = (pycountry.languages.get(alpha_2=code) if len(code) == 2 else None) or (
        pycountry.languages.get(alpha_3=code) if len(code) == 3 else None
    )
    if lang is None:
        return None
    name = getattr(lang, "common_name", None) or lang.name
    return re.sub(r"\s*\([^)]*\)$", "", name)  # "Modern Greek (1453-)" -> "Modern Greek"


def _currency_name(code: str) -> str | None:
    import pycountry

    if code in _FUND_CURRENCIES:
        return None
    cur = pycountry.currencies.get(alpha_3=code)
    return cur.name if cur is not None else None


@functools.lru_cache(maxsize=1)
def _build() -> tuple[tuple[Fact, ...], tuple[tuple[str, int], ...]]:
    import pycountry
    from countryinfo import CountryInfo

    skipped: Counter[str] = Counter()
    countries: dict[str, dict[str, Any]] = {}  # iso3 -> entry
    for _key, entry in sorted(CountryInfo.all().items()):
        iso3 = ((entry.get("ISO") or {}).get("alpha3") or "").strip().upper()
        if not iso3:
            skipped["entry without ISO code"] += 1
            continue
        if pycountry.countries.get(alpha_3=iso3) is None:
            skipped["entry with a retired ISO code"] += 1
            continue
        if CountryInfo(iso3).name() != entry.get("name"):
            skipped["entry duplicating an ISO code"] += 1
            continue
        countries[iso3] = entry
    names = {iso3: e["name"].strip() for iso3, e in countries.items()}

    by_relation: dict[str, list[Fact]] = {rid: [] for rid in RELATION_IDS}
    for iso3 in sorted(countries, key=lambda c: (names[c], c)):
        entry, name = countries[iso3], names[iso3]
        capital = entry.get("capital")
        capital = (capital[0] if capital else None) if isinstance(capital, list) else capital
        capital = (capital or "").strip()
        if capital:
            cid = f"city:{capital}"
            by_relation["P36"].append(Fact("P36", name, capital, iso3, cid))
            by_relation["P1376"].append(Fact("P1376", capital, name, cid, iso3))
        else:
            skipped["missing capital"] += 1
        continent = _continent(entry)
        if continent:
            by_relation["P30"].append(Fact("P30", name, continent, iso3, f"continent:{continent}"))
        else:
            skipped["missing continent"] += 1
        objects: dict[str, list[tuple[str, str]]] = {"P37": [], "P38": [], "P47": []}
        for code in entry.get("languages") or []:
            lname = _language_name(code.strip())
            if lname:
                objects["P37"].append((lname, f"lang:{_LANGUAGE_CODE_FIXES.get(code, code)}"))
            else:
                skipped["unknown language code"] += 1
        for code in entry.get("currencies") or []:
            cname = _currency_name(code.strip().upper())
            if cname:
                objects["P38"].append((cname, f"cur:{code.strip().upper()}"))
            else:
                skipped["unknown, retired or fund currency code"] += 1
        for code in entry.get("borders") or []:
            code = code.strip().upper()
            if code in names and code != iso3:
                objects["P47"].append((names[code], code))
            else:
                skipped["border code not a country here"] += 1
        for rid, objs in objects.items():
            for label, oid in sorted(set(objs)):
                by_relation[rid].append(Fact(rid, name, label, iso3, oid))
    by_relation["P1376"].sort(key=lambda f: (f.subject, f.object))
    facts = tuple(f for rid in RELATION_IDS for f in by_relation[rid])
    stats = (("countries", len(countries)), ("facts", len(facts))) + tuple(sorted(skipped.items()))
    return facts, stats


def countryinfo_stats() -> dict[str, int]:
    """Counts of the built-in set: countries, facts, and every kind of skipped entry or code."""
    return dict(_build()[1])


def load_countryinfo(relations: list[str] | None = None) -> FactSet:
    """The built-in country facts (module docstring); `relations` keeps only those ids
    (unknown ids raise ConfigError). Source: `countryinfo:<package version>`."""
    from importlib.metadata import version

    facts = list(_build()[0])
    source = f"countryinfo:{version('countryinfo')}"
    wanted = check_relations(relations, RELATION_IDS, source)
    keep = set(wanted) if wanted is not None else set(RELATION_IDS)
    facts = [f for f in facts if f.relation in keep]
    rels = {}
    for rid in RELATION_IDS:
        if rid in keep:
            label, template, description = _TEMPLATES[rid]
            rel_facts = [f for f in facts if f.relation == rid]
            rels[rid] = Relation(rid, label, template, infer_cardinality(rel_facts), description)
    return FactSet(facts=facts, relations=rels, source=source)
