"""A stated diet or abstinence against eating or drinking what it excludes ("I'm vegetarian" /
"I had steak again, love it"; "I'm allergic to shellfish" / "I had shrimp tacos")."""

from __future__ import annotations

import re

from maintenance.conflict_detector.finding import Finding
from maintenance.conflict_detector.lexicon import NEGATORS, normalise, words

_MEAT = {"steak", "steaks", "beef", "burger", "burgers", "hamburger", "bacon", "ham", "pork", "chicken", "lamb",
         "sausage", "sausages", "salami", "pepperoni", "meatballs", "meat", "veal", "turkey", "brisket", "ribs",
         "prosciutto", "chorizo", "duck", "venison", "wings", "hot dog", "meatloaf", "kebab"}  # fmt: skip
_FISH = {"fish", "salmon", "tuna", "sushi", "shrimp", "prawns", "cod", "sardines", "oysters", "lobster", "crab",
         "anchovies", "mussels", "seafood"}  # fmt: skip
_DAIRY_EGG = {"cheese", "milk", "butter", "yogurt", "yoghurt", "cream", "eggs", "egg", "omelette", "ice cream",
              "honey", "latte", "cheeseburger", "pizza"}  # fmt: skip
_ALCOHOL = {"beer", "beers", "wine", "whisky", "whiskey", "vodka", "gin", "rum", "tequila", "cocktail", "cocktails",
            "champagne", "margarita", "margaritas", "pint", "pints", "sake", "cider", "prosecco", "bourbon",
            "mojito", "negroni", "ipa", "lager", "stout"}  # fmt: skip
_GLUTEN = {"bread", "pasta", "baguette", "croissant", "bagel", "pizza", "beer", "noodles", "cake", "sourdough"}
_RED_MEAT = {
    "steak",
    "steaks",
    "beef",
    "burger",
    "burgers",
    "hamburger",
    "lamb",
    "veal",
    "brisket",
    "ribs",
    "venison",
    "meatballs",
    "pork",
    "bacon",
    "ham",
    "sausage",
    "sausages",
    "salami",
    "chorizo",
    "kebab",
}
_SUGAR = {"chocolate", "cake", "candy", "sweets", "cookies", "cookie", "ice cream", "soda", "dessert", "donut",
          "doughnut", "brownie", "brownies", "biscuits", "sugar"}  # fmt: skip
_PORK = {"pork", "bacon", "ham", "salami", "pepperoni", "prosciutto", "chorizo", "sausage", "sausages"}

# (pattern naming a diet, its label, the foods it excludes)
_BECOME = r"\b(?:am|is|be|been|went|gone|turned|become|became|going|stay|staying) (?:a |fully |strictly |strict )?"
_DIETS = [
    (re.compile(_BECOME + r"vegan\b|\bvegan (?:since|for)\b|\bplant-based\b"), "vegan", _MEAT | _FISH | _DAIRY_EGG),
    (re.compile(_BECOME + r"vegetarian\b|\bvegetarian (?:since|for)\b"), "vegetarian", _MEAT | _FISH),
    (re.compile(r"\b(?:am|is|went|gone|became|been) (?:a )?pescatarian\b"), "pescatarian", _MEAT),
    (re.compile(r"\b(?:do|does) not eat (?:any )?red meat\b|\bquit red meat\b|\bno red meat\b"), "no red meat",
     _RED_MEAT),
    (re.compile(r"\bquit (?:eating )?sugar\b|\b(?:do|does) not eat (?:any )?sugar\b|\bsugar-free diet\b"),
     "no sugar", _SUGAR),
    (re.compile(r"\b(?:do|does|did) not eat (?:any )?(?:meat|animal products)\b|\bnever eat (?:any )?meat\b"
                r"|\bquit (?:eating )?meat\b|\bno longer eat meat\b"), "no meat", _MEAT),
    (re.compile(r"\b(?:do|does) not (?:drink|touch) (?:any )?(?:alcohol|booze)\b|\bnever (?:drink|touch) alcohol\b"
                r"|\b(?:am|is|been|went|stay|staying) (?:completely |totally )?(?:sober|teetotal|a teetotaler)\b"
                r"|\bquit (?:drinking|alcohol)\b"),
     "no alcohol", _ALCOHOL),
    (re.compile(r"\b(?:am|is) (?:a )?coeliac\b|\b(?:am|is) (?:a )?celiac\b|\bgluten-free\b"), "gluten-free", _GLUTEN),
    (re.compile(r"\b(?:do|does) not eat pork\b|\bnever eat pork\b|\b(?:keep|keeps|eat|eats) (?:strictly )?"
                r"(?:halal|kosher)\b"), "no pork", _PORK),
    (re.compile(r"\b(?:am|is) (?:lactose intolerant|dairy-free)\b|\b(?:do|does) not (?:eat|have) dairy\b"),
     "no dairy", {"cheese", "milk", "butter", "yogurt", "yoghurt", "cream", "ice cream", "latte", "milkshake"}),
]  # fmt: skip
_CONSUME = re.compile(
    r"\b(?:ate|eat|eating|eats|had|have|having|ordered|order|grilled|grill|cooked|cook|cooking|devoured|tried|"
    r"drank|drink|drinking|drinks|enjoyed|enjoy|love|loved|loves|got|grabbed|made|makes|make|sipped|finished|"
    r"split|shared|bbq|barbecued|barbecue|roasted|fried)\b"
)
_ALLERGY = re.compile(r"\ballergic to ([a-z]+(?: [a-z]+)?)")
# What an allergy to a kind of food excludes besides the word itself.
_ALLERGENS = {
    "shellfish": {"shrimp", "shrimps", "prawn", "prawns", "lobster", "crab", "oyster", "oysters", "mussels", "clams",
                  "scallops", "crayfish", "langoustine"},
    "nut": {"walnut", "walnuts", "almond", "almonds", "cashew", "cashews", "hazelnut", "hazelnuts", "pecan", "pecans",
            "pistachio", "pistachios", "nutella"},
    "peanut": {"peanut", "peanuts", "satay"},
    "dairy": {"milk", "cheese", "butter", "yogurt", "yoghurt", "cream", "ice cream", "latte"},
    "egg": {"egg", "eggs", "omelette", "mayonnaise"},
    "fish": {"salmon", "tuna", "cod", "sardines", "anchovies", "sushi", "trout", "mackerel"},
    "gluten": {"bread", "pasta", "baguette", "croissant", "bagel", "pizza", "noodles", "cake", "sourdough"},
    "wheat": {"bread", "pasta", "baguette", "croissant", "bagel", "pizza", "noodles", "cake", "sourdough"},
}  # fmt: skip


def _mentions(food: set[str], text: str) -> str | None:
    for item in sorted(food, key=len, reverse=True):
        if re.search(r"\b" + re.escape(item) + r"\b", text):
            return item
    return None


def _diet_vs_food(stated: str, other: str) -> Finding | None:
    for pattern, label, excluded in _DIETS:
        match = pattern.search(stated)
        if not match or re.search(r"\b(?:from|off|ended|ending|before)\W+(?:\w+\W+){0,2}$", stated[: match.start()]):
            continue  # "switched from a gluten-free diet to …": a diet left
        # The other statement eats what the diet excludes — and is not itself about the diet
        # ("vegan cheese", "veggie burger", "I miss bacon") or negated.
        if pattern.search(other) or re.search(r"\b(?:vegan|vegetarian|veggie|plant-based|meatless|meat-free|"
                                              r"non-alcoholic|alcohol-free|gluten-free|dairy-free|oat|soy|almond|"
                                              r"tofu|beyond|impossible|fake|faux|mock|miss|missing|craving|smell|"
                                              r"for (?:my|the|our) (?:kids|family|guests|husband|wife|partner|son|"
                                              r"daughter|dog|cat))\b", other):  # fmt: skip
            return None
        food = _mentions(excluded, other)
        if food and _CONSUME.search(other) and not (set(words(other)) & NEGATORS):
            return Finding("diet", f"Stated diet ({label}) against eating or drinking {food}.", 0.85)
    match = _ALLERGY.search(stated)
    if match and not set(words(stated)) & NEGATORS:
        allergen = match.group(1).split()[0]
        allergen = allergen[:-1] if allergen.endswith("s") and len(allergen) > 4 else allergen
        if (
            (
                re.search(r"\b" + re.escape(allergen) + r"s?\b", other)
                or _mentions(_ALLERGENS.get(allergen, set()), other)
            )
            and _CONSUME.search(other)
            and not re.search(r"\ballerg|\bfree\b|\bwithout\b|\bno\b|\bnot\b|\bavoid", other)
        ):
            return Finding("diet", f"Stated allergy ({allergen}) against eating it.", 0.8)
    return None


# What a statement of a diet is said with (lemmas, for the bucket's full-text index).
_DIET_WORDS = frozenset({
    "vegetarian", "vegan", "pescatarian", "teetotal", "teetotaler", "sober", "allergic", "celiac", "coeliac",
    "lactose", "halal", "kosher", "gluten", "meat", "alcohol", "pork", "dairy", "drinking", "plant", "sugar",
})  # fmt: skip
_ALL_EXCLUDED = _MEAT | _FISH | _DAIRY_EGG | _ALCOHOL | _GLUTEN | _PORK | _SUGAR | set().union(*_ALLERGENS.values())


def diet_probe(text: str) -> frozenset[str]:
    """Words to look for among a bucket's other memories (by full text, not by meaning):
    a statement of a diet looks for the foods it excludes, a meal for statements of a diet.
    Empty for anything else. Diet pairs are far apart in meaning ("I'm vegetarian" / "I had
    steak again"), so the nearest neighbours alone would miss them."""
    low = normalise(text)
    if any(pattern.search(low) for pattern, _label, _foods in _DIETS) or _ALLERGY.search(low):
        excluded = set().union(*(foods for pattern, _label, foods in _DIETS if pattern.search(low)))
        allergy = _ALLERGY.search(low)
        if allergy:
            allergen = allergy.group(1).split()[0]
            excluded |= {allergen} | _ALLERGENS.get(allergen.rstrip("s"), set())
        return frozenset(w for w in excluded if re.fullmatch(r"[a-z]+", w))
    if _CONSUME.search(low) and _mentions(_ALL_EXCLUDED, low):
        return _DIET_WORDS
    return frozenset()


def diet(a: str, b: str) -> Finding | None:
    """The diet cue for two normalised texts, in either order."""
    return _diet_vs_food(a, b) or _diet_vs_food(b, a)
