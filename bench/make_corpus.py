"""Deterministic generator of realistic agent memories for latency and throughput benchmarks.

Memories are atomic, self-contained sentences (8-40 words) that an agent would store about the
people it works for: preferences, relatives and friends, pets, homes, devices, work, health,
hobbies, dated events, assistant recommendations, and facts that change over time (a move, a new
job, a replaced phone, a new diet, a break-up), after which later memories use the new value.

A pool of fictional personas is drawn from the seed; each run (an agent session of 5-30
memories) belongs to one persona and one agent, and its ``created_at`` values increase within the
run. A persona's runs advance through a window of about three years.

    python bench/make_corpus.py --rows 100000 --seed 1 --out bench/data/corpus-100k.jsonl
    python bench/make_corpus.py --rows 1000000 --seed 1 --buckets 10 --out bench/data/corpus-1m.jsonl
    python bench/make_corpus.py --rows 100000 --seed 1 --out bench/data/corpus-100k.jsonl \\
        --queries 500 --queries-out bench/data/queries-100k.jsonl

Each output line is one JSON memory:
``{"content", "attributed_to", "agent_id", "run_id", "hint_tags", "created_at"}`` plus ``"bucket"``
(an integer in [0, N)) with ``--buckets N``; a persona's memories all go to one bucket. The same
``--rows``/``--seed``/``--buckets`` always produce the same file.

The query set (``--queries``) holds natural-language questions about facts that are in the corpus,
one JSON object per line: ``{"id", "query", "kind", "source_row", "bucket"?, "filters"?}``.
``source_row`` is the 0-based line of the memory the question was written from (other memories
may answer it too). About one query in eight carries ``filters`` (agent_id, run_id,
attributed_to, hint_tags or a created_after/created_before window) that the source row satisfies,
in the shape of the search API's ``filters`` object.
"""

# ruff: noqa: E501 - sentence templates read better unwrapped
from __future__ import annotations

import argparse
import hashlib
import json
import random
import string
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

WINDOW_START = datetime(2022, 7, 1, tzinfo=UTC)
WINDOW_DAYS = 3 * 365
MIN_WORDS, MAX_WORDS = 8, 40

# --------------------------------------------------------------------------------------------
# Vocabulary (invented or generic; no external data set)
# --------------------------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.replace("_", " ") for w in text.split())


FIRST_NAMES = _words(
    """Maya Tomás Ingrid Rahul Denise Kenji Grace Ahmed Sofia Marcus Priya Elliot Amara Bruno Chloe Dmitri Esther
    Farah Gustavo Hana Idris Jonah Keziah Lars Mei Nadia Oscar Paloma Quentin Rosa Samir Talia Umar Vera Wendell
    Ximena Yusuf Zara Adaeze Benedikt Carmen Dario Elif Finn Greta Hugo Isla Jamal Kirsi Leon Marisol Nikhil Odette
    Pavel Rania Stellan Tamsin Ulla Viktor Wren Yara Zeke Aditi Bastien Celeste Dorian Emeka Freya Gideon Hollis
    Ines Jasper Kalani Linnea Matteo Noor Orla Pedro Reuben Saoirse Theo Uma Valentina Wiremu Yoshi Zainab Anouk
    Callum Dani Esme Felix Gulnara Henrik Ilse Joaquin Kofi Lucia Mateus Nell Obi Petra Ravi Signe Tobias Ugo Vivian
    Willa Xavier Yuki Ziggy Alma Bram Cosima Dev Eun-ji Fatima Gael Harriet Ivo Juno Kamal Lior Mina Nils Ottilie
    Quinn Rafael Selin Tariq Ursula Vikram Winnie Yasmin Zoltan Aurelio Bea Cyrus Delphine Ezra Fleur Ganesh Hedda
    Ilario Jude Kaia Lorcan Margit Nasser Oona Piers Rhea Soren Thandiwe Ulrich Veda Wade Xia Yannick Zora""",
)
LAST_NAMES = _words(
    """Okafor Regalado Halvorsen Menon Carter Watanabe Liu El-Sayed Rossi Bell Natarajan Brandt Abernathy Barros
    Castellano Dubois Eklund Ferreira Galloway Hashemi Iverson Jankowski Kowalczyk Lindqvist Moreau Nakamura Oduya
    Petrov Quintero Rasmussen Sandoval Takahashi Ueda Valdez Whitfield Yilmaz Zielinski Achebe Bergstrom Cardenas
    Delacroix Esposito Fontaine Gutierrez Haddad Ishikawa Jovanovic Kaur Lambert Mwangi Novak Oyelaran Pereira
    Quigley Romero Sato Thornbury Underwood Vasquez Wojcik Xu Yamada Zimmermann Aguilar Bishop Chowdhury Dimitrov
    Eriksen Farouk Greaves Holloway Ibarra Jensen Kimura Lachance Mbeki Nilsen Ortega Pacheco Reyes Schofield
    Tanaka Ulloa Vermeer Weber Yeoh Adeyemi Blackwood Costa Devlin Engel Fitzgerald Grant Hargreaves Ikeda Juarez
    Kovacs Lowe Mendez Nyberg O'Connell Park Rahman Stewart Tran Varga Wallace Young Zamora Ahn Baptiste Conti
    Dalton Estrada Falk Gomez Hale Iqbal Jaramillo Keller Larsen Moss Navarro Ostrowski Pike Ruiz Silva Toivonen""",
)
CITIES = _words(
    """Columbus Pittsburgh Austin Round_Rock Duluth Minneapolis Edinburgh Basel Portland Falmouth Osaka Tokyo Toronto
    Manchester Milan Copenhagen Tulsa Seattle Tacoma Boulder Denver Lisbon Porto Valencia Seville Lyon Bordeaux
    Ghent Utrecht Hamburg Leipzig Gothenburg Bergen Tampere Krakow Brno Ljubljana Zagreb Thessaloniki Izmir
    Marrakesh Accra Nairobi Kigali Cape_Town Durban Pune Kochi Chennai Jaipur Hanoi Da_Nang Chiang_Mai Taipei Busan
    Sapporo Fukuoka Auckland Wellington Hobart Adelaide Perth Vancouver Victoria Calgary Halifax Montreal Quebec_City
    Boston Providence Burlington Asheville Savannah Nashville Madison Milwaukee Ann_Arbor Santa_Fe Tucson Boise
    Spokane Sacramento Oakland San_Diego Honolulu Anchorage Oaxaca Merida Bogota Medellin Quito Cusco Valparaiso
    Montevideo Cordoba Recife Florianopolis Reykjavik Galway Cork Bristol Leeds Glasgow Cardiff Bath York Oslo
    Aarhus Malmo Tallinn Riga Vilnius Graz Salzburg Bologna Turin Naples Palermo Bilbao Granada Faro Funchal""",
)
STREET_WORDS = _words(
    """Maple Cedar Willow Harbor Mill Orchard Chestnut Linden Juniper Quarry Station Garden Rowan Hazel Elm Birch
    Larch Copper Foundry Canal Meadow Ridge Lantern Kestrel Heron Bramble Aspen Sycamore Beacon Chapel"""
)
STREET_KINDS = _words("Street Road Avenue Lane Terrace Close Way Place Row Drive")
HOME_KINDS = _words(
    """a_one-bedroom_apartment a_two-bedroom_apartment a_studio_flat a_rented_townhouse a_1920s_bungalow
    a_craftsman_house a_top-floor_condo a_semi-detached_house a_converted_loft a_small_farmhouse a_houseboat
    a_garden_flat a_narrow_rowhouse a_ground-floor_flat a_shared_house"""
)
EMPLOYER_A = _words(
    """Northwind Bluefin Haulwise Clearpath Cobalt Brightline Harborview Ironleaf Juniper Keystone Lumen Meridian
    Nimbus Orchard Pinecrest Quarrystone Redwing Silverline Tidewater Upland Vantage Westgate Yellowpine Zenith
    Alder Beacon Cinder Driftwood Ember Foxglove Granite Hollow Inkwell Kestrel Larkspur Mosaic Nettle Oakmoss"""
)
EMPLOYER_B = _words(
    """Logistics Analytics Health Credit_Union Robotics Outfitters Bakery Studios Energy Labs Insurance Media
    Foods Architects Dental Software Freight Pharmacy Games Bank Consulting Hospital Press Telecom Biotech"""
)
JOB_TITLES = _words(
    """data_analyst backend_engineer platform_engineer product_manager pediatric_nurse pastry_chef architect
    dispatcher maths_teacher project_architect UX_designer wedding_photographer bakery_owner postdoc_researcher
    physiotherapist accountant electrician paralegal museum_curator sous_chef high-school_counselor pharmacist
    veterinary_nurse site_reliability_engineer marketing_lead HR_business_partner civil_engineer librarian
    sales_engineer technical_writer operations_manager lab_technician dental_hygienist social_worker
    landscape_architect machine_learning_engineer QA_lead finance_controller copywriter logistics_coordinator
    barista store_manager research_scientist bus_driver firefighter translator graphic_designer"""
)
PROJECT_A = _words("Falcon Ember Atlas Juniper Quartz Harbor Nova Tundra Cascade Orbit Sparrow Mosaic Granite Lantern")
PROJECT_B = _words(
    """billing_migration data_warehouse_rewrite mobile_app_launch scheduling_service search_revamp
    customer_portal inventory_sync payments_API onboarding_redesign reporting_dashboard kiosk_rollout
    warehouse_robotics_pilot telehealth_product batch_job_modernisation loyalty_program"""
)
RELATIONS = _words(
    """sister brother mother father daughter son cousin aunt uncle grandmother grandfather niece nephew best_friend
    roommate colleague manager neighbour mother-in-law father-in-law stepdaughter godson old_school_friend"""
)
REL_JOBS = _words(
    """teacher nurse carpenter software_developer bus_driver chef dentist student florist lawyer farmer
    paramedic journalist plumber potter librarian mechanic pilot vet_technician structural_engineer"""
)
DOG_BREEDS = _words(
    """beagle greyhound corgi blue_heeler chocolate_lab golden_retriever border_collie dachshund whippet
    miniature_schnauzer Shiba_Inu boxer poodle cocker_spaniel Bernese_mountain_dog French_bulldog pug"""
)
CAT_KINDS = _words("black_cat tabby calico_cat ginger_cat Siamese_cat Maine_Coon grey_cat tuxedo_cat Ragdoll Bengal")
OTHER_PETS = _words("rabbit parrot tortoise hamster bearded_dragon leopard_gecko budgie goldfish ferret guinea_pig")
PET_NAMES = _words(
    """Biscuit Pepper Mole Waffles Mochi Daifuku Duke Ranger Tuva Pickles Chutney Pretzel Nori Sprocket Juniper
    Basil Clementine Ziggy Pistachio Maple Bandit Olive Noodle Captain Fig Rocket Mango Hazel Tofu Pumpkin
    Scout Luna Pepperoni Bagel Dumpling Sesame Marble Cosmo Truffle Kiwi Button Gizmo Muffin Yuzu Teddy Saffron"""
)
PHONES = _words(
    """iPhone_15 iPhone_13_mini iPhone_SE Pixel_8 Pixel_6 Pixel_7a Galaxy_S23 Galaxy_A54 Fairphone_5 Moto_G_Power
    OnePlus_12 Nothing_Phone_2 Xperia_10 Galaxy_Z_Flip"""
)
LAPTOPS = _words(
    """MacBook_Air_M2 MacBook_Pro_14 ThinkPad_X1_Carbon ThinkPad_T14 Dell_XPS_13 Framework_13 Surface_Laptop_5
    Chromebook_Plus ZenBook_14 HP_Spectre"""
)
WATCHES = _words(
    """Garmin_Forerunner_255 Garmin_Forerunner_965 Apple_Watch_Series_8 Fitbit_Charge_6 Coros_Pace_3 Pixel_Watch
    Galaxy_Watch_6 Oura_ring"""
)
GADGETS = _words(
    """Kindle_Paperwhite Kobo_Clara iPad_Pro iPad_mini Sony_WH-1000XM5_headphones AirPods_Pro Steam_Deck
    Nintendo_Switch Nanit_baby_monitor Roomba Fujifilm_X-T5 Sony_A7_III DJI_Mini_4_Pro Instant_Pot Vitamix
    espresso_machine e-bike cargo_bike 3D_printer drawing_tablet"""
)
CARS = _words(
    """2012_Honda_Civic RAV4_Hybrid Subaru_Forester Kia_Niro_EV Mini_Cooper 2009_Honda_Fit Tesla_Model_3
    VW_ID.4 Toyota_Corolla Mazda_CX-5 Ford_Transit_campervan Skoda_Octavia_estate Hyundai_Ioniq_5 Volvo_XC40"""
)
DISHES = _words(
    """mushroom_jollof pad_thai shakshuka dal_makhani bibimbap ramen carbonara parmigiana pho tacos_al_pastor
    chana_masala paella moussaka laksa pierogi bun_cha falafel_wraps green_curry lasagne risotto_alla_milanese
    sambar miso_soup fish_pie chili_con_carne shepherd's_pie okonomiyaki ceviche arepas jambalaya gumbo katsu_curry
    spanakopita pasta_alla_norma karimeen_pollichathu rasam molokhia sourdough_pizza banh_mi tagine biryani"""
)
CUISINES = _words(
    """Thai Ethiopian Korean Mexican Lebanese Vietnamese Sichuan Japanese Georgian Peruvian Keralan Nigerian
    Sardinian Basque Turkish Malaysian Greek Persian Oaxacan Cantonese"""
)
DRINKS = _words(
    """oat_flat_white black_coffee cold_brew masala_chai green_tea mint_tea matcha_latte decaf_cappuccino
    sparkling_water kombucha earl_grey rooibos hot_chocolate iced_americano cortado yerba_mate ginger_beer"""
)
DIETS = _words("vegetarian vegan pescatarian gluten-free low-sodium dairy-free omnivore halal Mediterranean low-FODMAP")
DISLIKES = _words(
    """cilantro olives mushrooms blue_cheese anchovies raw_onion coconut licorice beetroot pickles tofu eggplant
    oysters mayonnaise sardines"""
)
HOBBIES = _words(
    """bouldering trail_running pottery home_brewing oud sourdough_baking birdwatching quilting fingerstyle_guitar
    open-water_swimming cycling gardening chess woodworking knitting photography salsa_dancing rowing sketching
    sea_kayaking Lego_building fly_fishing bass_fishing yoga pilates tennis padel bread_baking calligraphy
    stargazing ceramics watercolour beekeeping choir_singing board_games crosswords rock_climbing skiing
    snowboarding triathlon half_marathons orienteering"""
)
GENRES = _words(
    """jazz_piano indie_folk Afrobeats bossa_nova classical_guitar synthwave bluegrass K-pop Arabic_maqam_music
    Motown ambient_electronica film_scores sea_shanties opera"""
)
LANGUAGES = _words("Danish Spanish German Japanese Tamil Arabic Portuguese Korean Italian French Swahili Dutch Polish")
ALLERGIES = _words("shellfish peanuts tree_nuts penicillin cats bee_stings sesame latex dust_mites birch_pollen")
CONDITIONS = _words(
    """migraines high_cholesterol type_2_diabetes plantar_fasciitis asthma a_rotator_cuff_strain lower_back_pain
    an_ACL_reconstruction tennis_elbow hay_fever insomnia a_torn_meniscus"""
)
MEDS = _words(
    """atorvastatin_20_mg metformin_500_mg sumatriptan rimegepant a_daily_antihistamine vitamin_D levothyroxine
    a_steroid_inhaler magnesium_glycinate iron_supplements"""
)
EVENTS = _words(
    """half_marathon sprint_triathlon piano_recital pottery_fair wedding baptism book_club_meeting school_play
    job_interview dentist_appointment conference_talk ensemble_concert cycling_sportive chess_tournament
    farmers_market_stall house_viewing parent-teacher_evening fishing_tournament art_exhibition charity_bake_sale"""
)
TASKS = _words(
    """renew_the_passport book_the_car_service pay_the_council_tax call_the_landlord order_a_birthday_cake
    submit_the_expense_report water_the_allotment refill_the_prescription back_up_the_laptop
    return_the_library_books schedule_the_vet_checkup buy_a_gift_for_the_anniversary cancel_the_gym_trial"""
)
RESTAURANT_A = _words("Copper Little Golden Crooked Salt Blue Wild Olive Paper Iron Velvet Smoke Saffron Lucky")
RESTAURANT_B = _words("Lantern Kettle Fig Anchor Sparrow Table Oven Pantry Harbour Spoon Orchard Ladle Tavern Hearth")
ACTIVITIES = _words(
    """a_sunrise_hike a_food_tour a_museum_morning a_day_trip_by_train a_kayak_rental a_cooking_class a_beach_day
    a_wine-free_vineyard_lunch a_bike_tour a_street-art_walk a_hot_spring_visit a_boat_trip"""
)
CONCEPTS = _words(
    """Kafka_consumer_groups HNSW_indexes compound_interest sourdough_hydration cone_6_glaze_chemistry
    rotator_cuff_rehab tax-free_savings_accounts heat_pump_sizing RRF_rank_fusion B-dot_detumbling
    dry-hopping_timing lactate_threshold_training"""
)
TIMES = _words("7:30_am 8:00_am 9:15_am 12:30_pm 4:30_pm 5:45_pm 6:00_pm 7:00_pm 7:30_pm 8:15_pm")
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
SEASON_WORDS = _words("morning afternoon evening")

AGENTS = (
    ("chat-assistant", 0.50),
    ("work-copilot", 0.16),
    ("travel-planner", 0.12),
    ("health-coach", 0.12),
    ("home-helper", 0.10),
)
TAG_VOCAB = (
    "preference",
    "person",
    "family",
    "work",
    "health",
    "travel",
    "device",
    "pet",
    "food",
    "home",
    "finance",
    "hobby",
    "schedule",
    "event",
    "change",
    "recommendation",
)
# Tags that plausibly accompany a memory's main tag, used to fill up to the drawn tag count.
RELATED_TAGS = {
    "food": ("preference", "health", "family"),
    "preference": ("food", "travel", "schedule"),
    "person": ("family", "event", "schedule"),
    "family": ("person", "event", "home"),
    "work": ("schedule", "finance", "person"),
    "health": ("schedule", "food", "hobby"),
    "travel": ("event", "preference", "finance"),
    "device": ("finance", "hobby", "recommendation"),
    "pet": ("home", "family", "health"),
    "home": ("finance", "family", "change"),
    "finance": ("home", "work", "schedule"),
    "hobby": ("health", "schedule", "preference"),
    "schedule": ("event", "work", "family"),
    "event": ("schedule", "travel", "family"),
    "change": ("person", "home", "work"),
    "recommendation": ("device", "travel", "food"),
}
# --------------------------------------------------------------------------------------------
# Personas
# --------------------------------------------------------------------------------------------


@dataclass
class Relative:
    relation: str
    name: str
    city: str
    job: str


@dataclass
class Pet:
    kind: str
    name: str
    age: int


@dataclass
class Persona:
    index: int
    first: str
    last: str
    pronoun: str  # they | she | he
    city: str
    home: str
    street: str
    employer: str
    job: str
    project: str
    manager: str
    partner: str | None
    relatives: list[Relative]
    pets: list[Pet]
    phone: str
    laptop: str
    watch: str
    gadget: str
    car: str | None
    diet: str
    drink: str
    cuisine: str
    dish: str
    dislike: str
    hobbies: list[str]
    genre: str
    language: str
    allergy: str | None
    condition: str | None
    med: str | None
    bucket: int = 0
    clock: float = 0.0  # days since WINDOW_START of the persona's current run
    history: list[str] = field(default_factory=list)

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"

    @property
    def poss(self) -> str:
        return {"she": "her", "he": "his"}.get(self.pronoun, "their")


def _employer(rng: random.Random) -> str:
    return f"{rng.choice(EMPLOYER_A)} {rng.choice(EMPLOYER_B)}"


def _person_name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def make_personas(rng: random.Random, count: int, buckets: int) -> list[Persona]:
    personas: list[Persona] = []
    used: set[str] = set()
    for i in range(count):
        for _ in range(50):
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            if f"{first} {last}" not in used:
                break
        used.add(f"{first} {last}")
        relatives = [
            Relative(rng.choice(RELATIONS), rng.choice(FIRST_NAMES), rng.choice(CITIES), rng.choice(REL_JOBS))
            for _ in range(rng.randint(2, 5))
        ]
        pets = []
        for _ in range(rng.choices((0, 1, 2), (0.35, 0.45, 0.2))[0]):
            kind = rng.choice(rng.choice((DOG_BREEDS, CAT_KINDS, OTHER_PETS)))
            pets.append(Pet(kind, rng.choice(PET_NAMES), rng.randint(1, 14)))
        has_health = rng.random()
        personas.append(
            Persona(
                index=i,
                first=first,
                last=last,
                pronoun=rng.choices(("she", "he", "they"), (0.47, 0.47, 0.06))[0],
                city=rng.choice(CITIES),
                home=rng.choice(HOME_KINDS),
                street=f"{rng.choice(STREET_WORDS)} {rng.choice(STREET_KINDS)}",
                employer=_employer(rng),
                job=rng.choice(JOB_TITLES),
                project=f"{rng.choice(PROJECT_A)} {rng.choice(PROJECT_B)}",
                manager=_person_name(rng),
                partner=rng.choice(FIRST_NAMES) if rng.random() < 0.6 else None,
                relatives=relatives,
                pets=pets,
                phone=rng.choice(PHONES),
                laptop=rng.choice(LAPTOPS),
                watch=rng.choice(WATCHES),
                gadget=rng.choice(GADGETS),
                car=rng.choice(CARS) if rng.random() < 0.7 else None,
                diet=rng.choice(DIETS),
                drink=rng.choice(DRINKS),
                cuisine=rng.choice(CUISINES),
                dish=rng.choice(DISHES),
                dislike=rng.choice(DISLIKES),
                hobbies=rng.sample(HOBBIES, rng.randint(2, 4)),
                genre=rng.choice(GENRES),
                language=rng.choice(LANGUAGES),
                allergy=rng.choice(ALLERGIES) if has_health < 0.35 else None,
                condition=rng.choice(CONDITIONS) if has_health > 0.55 else None,
                med=rng.choice(MEDS) if has_health > 0.75 else None,
                bucket=i % buckets if buckets else 0,
            )
        )
    return personas


# --------------------------------------------------------------------------------------------
# Memory templates. Each returns (content, tags, query) where query is None or (kind, text).
# Optional clauses (_tail) add detail, length and variety, so that repeated facts about one
# persona rarely come out word for word the same.
# --------------------------------------------------------------------------------------------

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
EVENING_TIMES = _words("8_pm 8:30_pm 9_pm 9:30_pm 10_pm 10:30_pm 11_pm")
TRAINING = _words(
    "half_marathon sprint_triathlon cycling_sportive chess_tournament fishing_tournament piano_recital 10K_race"
)
STORES = _words("Market Grocer Co-op Deli Bazaar Corner_Shop Superstore")
PLACES = _words(
    """the_library the_climbing_gym school football_practice the_train_station swim_club the_community_centre
    the_farmers_market the_allotment the_office piano_lessons the_dog_park"""
)
GOALS = _words(
    """a_deposit_on_a_flat a_new_road_bike a_family_trip a_kitchen_renovation an_emergency_fund a_wedding
    a_used_electric_car a_pottery_kiln a_sabbatical a_new_laptop"""
)
OPINION_THINGS = _words(
    """smart_fridges open-plan_offices airport_lounges avocado_toast loyalty_apps subscription_boxes
    cruise_holidays tasting_menus standing_desks VR_headsets"""
)


def _date(rng: random.Random, when: datetime, ahead: int = 0, full: bool = False) -> str:
    """A date near ``when`` (+ ``ahead`` days) in one of three styles; ``full`` excludes month-only."""
    d = when + timedelta(days=rng.randint(-20, 5) + ahead)
    style = rng.random() * (0.7 if full else 1.0)
    if style < 0.4:
        return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"
    if style < 0.7:
        return f"{d.day} {MONTHS[d.month - 1]} {d.year}"
    return f"{MONTHS[d.month - 1]} {d.year}"


def _on(rng: random.Random, when: datetime, ahead: int = 0) -> str:
    """The date with its preposition: "on March 3, 2024" or "in March 2024"."""
    d = _date(rng, when, ahead)
    return f"in {d}" if d[0].isalpha() and "," not in d else f"on {d}"


def _name(rng: random.Random, p: Persona) -> str:
    return p.full if rng.random() < 0.25 else p.first


def _money(rng: random.Random, lo: int, hi: int, step: int = 5) -> str:
    return f"${rng.randrange(lo, hi, step):,}"


def _restaurant(rng: random.Random) -> str:
    return f"the {rng.choice(RESTAURANT_A)} {rng.choice(RESTAURANT_B)}"


def _tail(rng: random.Random, p: Persona, topic: str, chance: float = 0.45, pool: tuple = ()) -> str:
    """An optional clause (with its leading punctuation) that adds a concrete detail."""
    if rng.random() >= chance:
        return ""
    rel = rng.choice(p.relatives)
    other = p.partner or rel.name
    if topic == "food":
        options = (
            f", because it reminds {p.poss} of a trip to {rng.choice(CITIES)}",
            f", a habit picked up from {p.poss} {rel.relation} {rel.name}",
            f", ideally from {_restaurant(rng)} near {p.street}",
            f", at least {rng.randint(2, 5)} times a month",
        )
    elif topic == "device":
        options = (
            f", mostly for video calls with {p.poss} {rel.relation} {rel.name} in {rel.city}",
            f", mainly for {rng.choice(p.hobbies)} and reading on the commute",
            f", and wants it to last at least {rng.randint(3, 7)} years",
        )
        if pool:
            options += (f", after comparing it with the {rng.choice(pool)}",)
    elif topic == "person":
        options = (
            f", and they talk on the phone every {rng.choice(WEEKDAYS)}",
            f"; the two of them share a love of {rng.choice(HOBBIES)}",
            f", and {p.first} hopes to see them in {rng.choice(MONTHS)}",
        )
    elif topic == "work":
        options = (
            f", with a team of {rng.randint(3, 25)} people",
            f", after {rng.randint(2, 14)} years in the field",
            f", commuting {rng.randint(10, 75)} minutes each way",
            f", working from home on {rng.choice(WEEKDAYS)}s",
        )
    elif topic == "event":
        options = (
            f", together with {other}",
            f", and wants a reminder {rng.randint(2, 7)} days before",
            f"; the budget is about {_money(rng, 50, 3000)}",
            ", weather permitting",
        )
    elif topic == "habit":
        options = (
            f", which {other} suggested",
            f", and has kept it up for about {rng.randint(2, 40)} weeks",
            f", as {p.first} mentioned {_on(rng, p_when(p))}",
        )
    else:  # "mention": provenance only
        options = (
            f", as {p.first} mentioned {_on(rng, p_when(p))}",
            f", {p.first} said in a chat {_on(rng, p_when(p))}",
        )
    return rng.choice(options)


def p_when(p: Persona) -> datetime:
    return WINDOW_START + timedelta(days=p.clock)


def t_pref_food(rng, p, when):
    n = _name(rng, p)
    r = rng.random()
    if r < 0.25:
        text = f"{n} loves {p.cuisine} food and would happily order {p.dish} every {rng.choice(WEEKDAYS)} night"
        q = ("preference", f"What kind of food does {p.first} like?")
    elif r < 0.45:
        text = f"{n} cannot stand {p.dislike} and asks for it to be left out of {rng.choice(DISHES)} or {rng.choice(DISHES)}"
        q = ("preference", f"Which ingredient does {p.first} dislike?")
    elif r < 0.65:
        text = f"{n}'s favourite comfort dish is {p.dish}, made the way {p.poss} {rng.choice(RELATIONS)} cooks it"
        q = ("preference", f"What is {p.first}'s favourite comfort food?")
    elif r < 0.85:
        text = f"{n} follows a {p.diet} diet and plans meals around {rng.choice(DISHES)} and {rng.choice(DISHES)} on busy weeks"
        q = ("preference", f"What diet does {p.first} follow?")
    else:
        text = f"{n} rated {_restaurant(rng)} in {p.city} {rng.randint(2, 5)} out of 5 and praised its {rng.choice(DISHES)}"
        q = ("preference", f"Which restaurants has {p.first} rated?")
    return text + _tail(rng, p, "food") + ".", ("food", "preference"), q


def t_pref_drink(rng, p, when):
    n = _name(rng, p)
    r = rng.random()
    if r < 0.4:
        text = f"{n} starts every {rng.choice(SEASON_WORDS)} with a {p.drink} and avoids caffeine after {rng.randint(1, 5)} pm"
    elif r < 0.75:
        place = rng.choice(("home", "a café", "the office", "the library", "a co-working space"))
        text = f"When working from {place}, {n} usually orders a {p.drink} and a {rng.choice(('croissant', 'bagel', 'muffin', 'scone', 'cinnamon bun'))}"
    else:
        text = f"{n} switched {p.poss} afternoon drink to {rng.choice(DRINKS)} to sleep better, keeping the {p.drink} for mornings"
    return (
        text + _tail(rng, p, "food", 0.3) + ".",
        ("food", "preference"),
        ("preference", f"What does {p.first} like to drink?"),
    )


def t_pref_misc(rng, p, when):
    n = _name(rng, p)
    opts = (
        (
            f"{n} prefers short bullet-point answers and wants reminders sent before {rng.choice(TIMES)} on weekdays",
            ("preference", "schedule"),
        ),
        (
            f"{n} likes a window seat on flights longer than {rng.randint(2, 9)} hours and packs noise-cancelling headphones",
            ("preference", "travel"),
        ),
        (
            f"{n} listens to {p.genre} while working and finds lyrics too distracting during deep focus",
            ("preference", "hobby"),
        ),
        (
            f"{n} prefers meetings on {rng.choice(WEEKDAYS)}s and keeps {rng.choice(WEEKDAYS)} mornings free for focused work",
            ("preference", "work", "schedule"),
        ),
        (
            f"{n} wants budgets shown in {rng.choice(('US dollars', 'euros', 'pounds', 'Canadian dollars', 'Swiss francs', 'yen'))} and rounded to the nearest {rng.choice(('ten', 'hundred', 'dollar'))}",
            ("preference", "finance"),
        ),
        (
            f"{n} avoids crowds and prefers museums on weekday mornings around {rng.choice(TIMES)}",
            ("preference", "travel"),
        ),
        (
            f"{n} thinks {rng.choice(OPINION_THINGS)} are overrated and would rather spend the money on {rng.choice(p.hobbies)}",
            ("preference", "finance"),
        ),
        (
            f"{n} likes hotels within walking distance of a {rng.choice(('park', 'market', 'train station', 'beach', 'climbing gym'))} and hates early check-out times",
            ("preference", "travel"),
        ),
    )
    text, tags = rng.choice(opts)
    q = ("preference", f"What are {p.first}'s preferences?") if rng.random() < 0.3 else None
    return text + _tail(rng, p, "mention", 0.3) + ".", tags, q


def t_person(rng, p, when):
    n = _name(rng, p)
    rel = rng.choice(p.relatives)
    r = rng.random()
    if r < 0.3:
        text = f"{n}'s {rel.relation} {rel.name} lives in {rel.city} and works as a {rel.job}"
        q = ("person", f"Where does {p.first}'s {rel.relation} {rel.name} live?")
    elif r < 0.5:
        text = f"{n}'s {rel.relation} {rel.name} is visiting from {rel.city} for {rng.randint(2, 21)} days from {_date(rng, when, 10)}"
        q = ("person", f"When is {rel.name} visiting {p.first}?")
    elif r < 0.65:
        gift = rng.choice(GADGETS + DISHES + HOBBIES)
        text = f"{n} wants to give {p.poss} {rel.relation} {rel.name} something related to {gift} for {rel.name}'s birthday in {rng.choice(MONTHS)}"
        q = ("person", f"What gift idea does {p.first} have for {rel.name}?")
    elif r < 0.8:
        text = f"{n}'s {rel.relation} {rel.name} recently took up {rng.choice(HOBBIES)} and sends {n} videos every {rng.choice(WEEKDAYS)}"
        q = ("person", f"What is {rel.name} learning?")
    else:
        text = f"{n} mentioned that {p.poss} {rel.relation} {rel.name} got a new job as a {rng.choice(JOB_TITLES)} at {_employer(rng)}"
        q = ("person", f"Where does {rel.name} work now?")
    return text + _tail(rng, p, "person") + ".", ("person", "family"), q


def t_partner(rng, p, when):
    n = _name(rng, p)
    if not p.partner:
        text = (
            f"{n} is single at the moment and spends most weekends on {rng.choice(p.hobbies)} and {rng.choice(HOBBIES)}"
        )
        return text + _tail(rng, p, "habit", 0.3) + ".", ("person",), None
    opts = (
        f"{n}'s partner {p.partner} works as a {rng.choice(REL_JOBS)} and is planning a surprise trip to {rng.choice(CITIES)}",
        f"{n} and {p.partner} cook {rng.choice(DISHES)} together every {rng.choice(WEEKDAYS)} as a standing date night",
        f"{p.partner}, {n}'s partner, is training for a {rng.choice(TRAINING)} and gets up at {rng.choice(TIMES)} to practise",
        f"{n} and {p.partner} are arguing about whether to spend {rng.choice(MONTHS)} in {rng.choice(CITIES)} or {rng.choice(CITIES)}",
    )
    return (
        rng.choice(opts) + _tail(rng, p, "mention", 0.3) + ".",
        ("person", "family"),
        ("person", f"Who is {p.first}'s partner?"),
    )


def t_pet(rng, p, when):
    n = _name(rng, p)
    if not p.pets:
        text = f"{n} would like to adopt a {rng.choice(DOG_BREEDS + CAT_KINDS)} once the lease on the {p.city} place allows pets"
        return text + _tail(rng, p, "mention", 0.3) + ".", ("pet", "home"), None
    pet = rng.choice(p.pets)
    opts = (
        f"{n}'s {pet.kind} {pet.name} is {pet.age} years old and gets nervous around {rng.choice(('thunderstorms', 'delivery trucks', 'the vacuum', 'fireworks', 'bicycles', 'the doorbell'))}",
        f"{n} is taking {pet.name}, a {pet.kind}, to the vet in {p.city} for a checkup {_on(rng, when, 14)}",
        f"{pet.name}, {n}'s {pet.kind}, now eats {rng.choice(('grain-free', 'senior', 'sensitive-stomach', 'high-protein'))} food twice a day after a vet visit",
        f"{n} needs a sitter for {pet.name} the {pet.kind} while travelling to {rng.choice(CITIES)} for {rng.randint(2, 14)} nights",
        f"{n}'s {pet.kind} {pet.name} learned to {rng.choice(('fetch hair ties', 'open the pantry', 'ring a bell to go out', 'sit on command', 'climb the bookshelf'))}",
    )
    return (
        rng.choice(opts) + _tail(rng, p, "mention", 0.3) + ".",
        ("pet",),
        ("pet", f"What is the name of {p.first}'s {pet.kind}?"),
    )


def t_home(rng, p, when):
    n = _name(rng, p)
    opts = (
        (f"{n} lives in {p.home} on {p.street} in {p.city}", ("home",)),
        (
            f"{n} is repainting the {rng.choice(('kitchen', 'nursery', 'hallway', 'spare room', 'bathroom', 'office'))} at the {p.city} home in {rng.choice(('sage green', 'warm white', 'navy', 'terracotta', 'pale yellow'))}",
            ("home",),
        ),
        (
            f"{n}'s landlord in {p.city} raised the rent by {rng.randint(3, 19)} percent, so {n} is comparing neighbourhoods",
            ("home", "finance"),
        ),
        (
            f"{n} got a quote of {_money(rng, 800, 25000, 50)} to fix the {rng.choice(('roof', 'boiler', 'windows', 'deck', 'plumbing', 'fence'))} at the {p.street} place",
            ("home", "finance"),
        ),
        (
            f"{n} grows {rng.choice(('tomatoes', 'herbs', 'chillies', 'dahlias', 'strawberries', 'courgettes'))} on the balcony of the {p.city} home",
            ("home", "hobby"),
        ),
    )
    text, tags = rng.choice(opts)
    return text + _tail(rng, p, "mention", 0.35) + ".", tags, ("home", f"Where does {p.first} live?")


def t_device(rng, p, when):
    n = _name(rng, p)
    which = rng.random()
    if which < 0.3:
        text = f"{n} uses a {p.phone} as {p.poss} main phone and keeps it on do-not-disturb after {rng.choice(EVENING_TIMES)}"
        q, pool = ("device", f"Which phone does {p.first} use?"), PHONES
    elif which < 0.55:
        text = f"{n} does most of {p.poss} work on a {p.laptop} and backs it up every {rng.choice(WEEKDAYS)}"
        q, pool = ("device", f"What laptop does {p.first} work on?"), LAPTOPS
    elif which < 0.72:
        text = f"{n} tracks runs and sleep with a {p.watch}, and the battery lasts about {rng.randint(2, 14)} days"
        q, pool = ("device", f"Which watch does {p.first} wear?"), WATCHES
    elif which < 0.88 or not p.car:
        text = f"{n} bought a {p.gadget} for about {_money(rng, 60, 1800)} and uses it almost every day"
        q, pool = ("device", f"What did {p.first} buy recently?"), ()
    else:
        text = (
            f"{n} drives a {p.car} and gets it serviced every {rng.randint(6, 18)} months at a garage near {p.street}"
        )
        q, pool = ("device", f"What car does {p.first} drive?"), CARS
    return text + _tail(rng, p, "device", pool=pool) + ".", ("device",), q


def t_work(rng, p, when):
    n = _name(rng, p)
    opts = (
        (f"{n} works as a {p.job} at {p.employer} in {p.city}", ("work",), ("work", f"Where does {p.first} work?")),
        (
            f"{n} is leading the {p.project} at {p.employer}, due by {_date(rng, when, 60)}",
            ("work", "schedule"),
            ("work", f"Which project is {p.first} leading?"),
        ),
        (
            f"{n}'s manager at {p.employer} is {p.manager}, who wants written updates every {rng.choice(WEEKDAYS)}",
            ("work", "person"),
            ("work", f"Who is {p.first}'s manager?"),
        ),
        (
            f"{n} presented the {p.project} results at the {p.employer} all-hands and fielded {rng.randint(3, 40)} questions",
            ("work", "event"),
            None,
        ),
        (
            f"{n} is on call for {p.employer} every {rng.choice(('second', 'third', 'fourth'))} week and dreads {rng.choice(('2 am pages', 'flaky alerts', 'weekend incidents'))}",
            ("work", "schedule"),
            None,
        ),
        (
            f"{n} asked for a raise at {p.employer} {_on(rng, when)} and is hoping for about {rng.randint(4, 15)} percent",
            ("work", "finance"),
            None,
        ),
    )
    text, tags, q = rng.choice(opts)
    return text + _tail(rng, p, "work") + ".", tags, q


def t_health(rng, p, when):
    n = _name(rng, p)
    if p.allergy and rng.random() < 0.4:
        text = f"{n} is allergic to {p.allergy} and checks menus and labels carefully"
        return (
            text + _tail(rng, p, "mention", 0.3) + ".",
            ("health", "food"),
            ("health", f"What is {p.first} allergic to?"),
        )
    if p.condition and rng.random() < 0.6:
        extra = f" and takes {p.med}" if p.med else ""
        text = f"{n} is managing {p.condition}{extra}, with a follow-up appointment {_on(rng, when, 30)}"
        return text + ".", ("health",), ("health", f"What health condition is {p.first} managing?")
    opts = (
        f"{n} wants to walk {rng.randint(6, 12)},{rng.choice(('000', '500'))} steps a day and is cutting back on {rng.choice(('sugar', 'caffeine', 'late-night snacks', 'takeaway food'))}",
        f"{n} sleeps badly before early starts and is trying a fixed bedtime of {rng.choice(EVENING_TIMES)}",
        f"{n} started physiotherapy {rng.choice(('once', 'twice', 'three times'))} a week in {p.city} after {rng.choice(('a cycling fall', 'a ski crash', 'a back strain', 'knee surgery'))}",
        f"{n} had a blood test {_on(rng, when)} and the doctor asked for a repeat in {rng.randint(2, 12)} weeks",
    )
    return rng.choice(opts) + _tail(rng, p, "habit", 0.3) + ".", ("health",), None


def t_hobby(rng, p, when):
    n = _name(rng, p)
    hobby = rng.choice(p.hobbies)
    opts = (
        f"{n} has been into {hobby} for {rng.randint(1, 15)} years and practises at least {rng.randint(2, 5)} times a week",
        f"{n} joined a {hobby} group in {p.city} that meets every {rng.choice(WEEKDAYS)} at {rng.choice(TIMES)}",
        f"{n} spent about {_money(rng, 40, 2500)} on new {hobby} gear",
        f"{n}'s goal for {when.year + (1 if when.month > 9 else 0)} is to get noticeably better at {hobby}",
        f"{n} is learning {p.language} with a {rng.randint(10, 400)}-day app streak and an evening class",
        f"{n} goes to {rng.choice(PLACES)} on {rng.choice(WEEKDAYS)}s and then squeezes in {hobby} before dinner",
    )
    return rng.choice(opts) + _tail(rng, p, "habit") + ".", ("hobby",), ("hobby", f"What hobbies does {p.first} have?")


def t_routine(rng, p, when):
    n = _name(rng, p)
    rel = rng.choice(p.relatives)
    r = rng.random()
    if r < 0.25:
        text = f"{n} does the weekly food shop at the {rng.choice(EMPLOYER_A)} {rng.choice(STORES)} every {rng.choice(WEEKDAYS)} {rng.choice(SEASON_WORDS)}"
        q = ("schedule", f"Where does {p.first} do the weekly food shop?")
        tags = ("schedule", "food")
    elif r < 0.5:
        place = rng.choice(PLACES)
        text = f"{n} picks up {p.poss} {rel.relation} {rel.name} from {place} every {rng.choice(WEEKDAYS)} at {rng.choice(TIMES)}"
        q = ("schedule", f"When does {p.first} pick {rel.name} up from {place}?")
        tags = ("schedule", "family")
    elif r < 0.75:
        text = f"{n} is saving {_money(rng, 50, 2000, 25)} a month for {rng.choice(GOALS)} and hopes to get there by {_date(rng, when, 300)}"
        q = ("finance", f"What is {p.first} saving up for?")
        tags = ("finance", "schedule")
    else:
        text = f"{n} reviews the household budget with {p.partner or rel.name} on the first {rng.choice(WEEKDAYS)} of each month"
        q = ("finance", f"When does {p.first} go through the household budget?")
        tags = ("finance", "schedule")
    return text + _tail(rng, p, "habit", 0.3) + ".", tags, q


def t_event(rng, p, when):
    n = _name(rng, p)
    r = rng.random()
    if r < 0.45:
        dest = rng.choice(CITIES)
        text = f"{n} travelled to {dest} {_on(rng, when)} for {rng.randint(2, 16)} days and liked {rng.choice(ACTIVITIES)} most"
        return text + _tail(rng, p, "event") + ".", ("travel", "event"), ("event", f"When did {p.first} go to {dest}?")
    if r < 0.75:
        ev = rng.choice(EVENTS)
        place = rng.choice((p.city, rng.choice(CITIES)))
        text = f"{n} has a {ev} on {_date(rng, when, 25, full=True)} in {place} at {rng.choice(TIMES)}"
        return text + _tail(rng, p, "event") + ".", ("event", "schedule"), ("event", f"When is {p.first}'s {ev}?")
    rel = rng.choice(p.relatives)
    text = f"{n} celebrated {p.poss} {rel.relation} {rel.name}'s birthday {_on(rng, when)} with {rng.choice(DISHES)} at {_restaurant(rng)}"
    return text + ".", ("event", "family"), ("event", f"How did {p.first} celebrate {rel.name}'s birthday?")


def t_change(rng, p, when):
    """A fact that changes: the persona is updated so later memories use the new value."""
    n = _name(rng, p)
    month = f"{MONTHS[when.month - 1]} {when.year}"
    kind = rng.choice(("move", "job", "phone", "diet", "relationship", "car", "pet"))
    if kind == "move":
        old, p.city = p.city, rng.choice([c for c in CITIES if c != p.city])
        p.home, p.street = rng.choice(HOME_KINDS), f"{rng.choice(STREET_WORDS)} {rng.choice(STREET_KINDS)}"
        text = f"{n} moved from {old} to {p.city} in {month} and now lives in {p.home} on {p.street}"
        q = ("change", f"Which city does {p.first} live in now?")
    elif kind == "job":
        old, p.employer, p.job = p.employer, _employer(rng), rng.choice(JOB_TITLES)
        p.manager, p.project = _person_name(rng), f"{rng.choice(PROJECT_A)} {rng.choice(PROJECT_B)}"
        text = f"{n} left {old} in {month} and started a new job as a {p.job} at {p.employer}"
        q = ("change", f"Where does {p.first} work now?")
    elif kind == "phone":
        old, p.phone = p.phone, rng.choice([x for x in PHONES if x != p.phone])
        why = rng.choice(("had a cracked screen", "stopped charging", "was too slow", "lost software updates"))
        text = f"{n} replaced {p.poss} {old} with a {p.phone} in {month} because the old one {why}"
        q = ("change", f"What phone does {p.first} have now?")
    elif kind == "diet":
        old, p.diet = p.diet, rng.choice([d for d in DIETS if d != p.diet])
        why = rng.choice(
            ("a documentary", "advice from a doctor", "a month-long challenge", "moving in with a new partner")
        )
        text = f"{n} switched from a {old} diet to a {p.diet} one in {month} after {why}"
        q = ("change", f"What is {p.first}'s diet now?")
    elif kind == "relationship":
        if p.partner:
            old, p.partner = p.partner, None
            text = f"{n} and {old} broke up in {month} after {rng.randint(1, 9)} years together and agreed to stay friendly"
        else:
            p.partner = rng.choice(FIRST_NAMES)
            text = f"{n} started dating {p.partner} after they met at a {rng.choice(HOBBIES)} meetup in {month}"
        q = ("change", f"Is {p.first} seeing anyone?")
    elif kind == "car":
        old, p.car = p.car, rng.choice(CARS)
        text = (
            f"{n} sold {p.poss} {old} and bought a {p.car} in {month}"
            if old
            else f"{n} bought {p.poss} first car, a {p.car}, in {month}"
        )
        q = ("change", f"What car does {p.first} drive now?")
    else:
        pet = Pet(rng.choice(rng.choice((DOG_BREEDS, CAT_KINDS, OTHER_PETS))), rng.choice(PET_NAMES), rng.randint(0, 9))
        p.pets.append(pet)
        text = f"{n} adopted a {pet.age}-year-old {pet.kind} named {pet.name} from a shelter in {p.city} in {month}"
        q = ("change", f"What new pet did {p.first} adopt?")
    p.history.append(kind)
    return text + _tail(rng, p, "mention", 0.3) + ".", ("change",), q


def t_assistant(rng, p, when):
    n = _name(rng, p)
    r = rng.random()
    if r < 0.18:
        product = rng.choice(WATCHES + PHONES + LAPTOPS + GADGETS)
        text = f"The assistant recommended the {product} to {n} as an upgrade over the {rng.choice((p.phone, p.laptop, p.watch, p.gadget))}"
        return (
            text + _tail(rng, p, "device", 0.3) + ".",
            ("recommendation", "device"),
            ("recommendation", f"What did the assistant recommend to {p.first}?"),
        )
    if r < 0.34:
        dest = rng.choice(CITIES)
        text = f"The assistant drafted a {rng.randint(3, 12)}-day itinerary for {n}'s trip to {dest}, starting with {rng.choice(ACTIVITIES)}"
        return (
            text + _tail(rng, p, "event", 0.3) + ".",
            ("recommendation", "travel"),
            ("travel", f"What itinerary did the assistant plan for {p.first} in {dest}?"),
        )
    if r < 0.5:
        task = rng.choice(TASKS)
        text = f"The assistant set a reminder for {n} to {task} on {_date(rng, when, 12, full=True)} at {rng.choice(TIMES)}"
        return text + ".", ("schedule",), ("schedule", f"When does {p.first} need to {task}?")
    if r < 0.62:
        text = f"The assistant suggested {rng.choice(DISHES)} as a {p.diet}-friendly dinner for {n} and {rng.choice(('family', 'friends', 'flatmates', 'guests'))}"
        return text + _tail(rng, p, "food", 0.3) + ".", ("recommendation", "food"), None
    if r < 0.72:
        text = (
            f"The assistant explained {rng.choice(CONCEPTS)} to {n} while helping with the {p.project} at {p.employer}"
        )
        return text + ".", ("work",), None
    if r < 0.82:
        thing = rng.choice(
            ("kitchen renovation", "bike upgrade", "trip", "wedding catering", "new kiln", "roof repair")
        )
        text = f"The assistant estimated that {n}'s {thing} would cost about {_money(rng, 300, 40000, 50)}"
        return (
            text + _tail(rng, p, "mention", 0.3) + ".",
            ("finance",),
            ("finance", f"How much did the assistant estimate for {p.first}'s plans?"),
        )
    if r < 0.9:
        rel = rng.choice(p.relatives)
        text = f"The assistant wrote a birthday message from {n} to {p.poss} {rel.relation} {rel.name} mentioning their shared love of {rng.choice(HOBBIES)}"
        return text + ".", ("family",), None
    restaurant = _restaurant(rng)
    text = f"The assistant booked a table for {rng.randint(2, 8)} at {restaurant} in {p.city} for {n} on {_date(rng, when, 9, full=True)} at {rng.choice(TIMES)}"
    return text + ".", ("event", "schedule"), ("event", f"Where is {p.first}'s dinner reservation?")


USER_KINDS = (
    (t_pref_food, 8),
    (t_pref_drink, 4),
    (t_pref_misc, 7),
    (t_person, 12),
    (t_partner, 4),
    (t_pet, 6),
    (t_home, 5),
    (t_device, 8),
    (t_work, 10),
    (t_health, 5),
    (t_hobby, 8),
    (t_routine, 5),
    (t_event, 11),
    (t_change, 4),
)
AGENT_BIAS = {
    "travel-planner": {t_event: 3.0, t_pref_misc: 1.5},
    "health-coach": {t_health: 4.0, t_pref_food: 2.0, t_hobby: 1.5},
    "work-copilot": {t_work: 4.0, t_device: 1.5, t_routine: 1.5},
    "home-helper": {t_home: 4.0, t_pet: 2.0, t_partner: 1.5, t_routine: 2.0},
}


def _kind_tables() -> dict[str, tuple[list, list[float]]]:
    tables = {}
    for agent, _ in AGENTS:
        bias = AGENT_BIAS.get(agent, {})
        funcs = [f for f, _ in USER_KINDS]
        weights = [w * bias.get(f, 1.0) for f, w in USER_KINDS]
        total = sum(weights)
        cum, acc = [], 0.0
        for w in weights:
            acc += w / total
            cum.append(acc)
        tables[agent] = (funcs, cum)
    return tables


# --------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------

_PUNCT = str.maketrans({c: " " for c in string.punctuation + "“”‘’–—…"})


def normalise(text: str) -> str:
    """Close to Engram's dedup normalisation: casefold, punctuation to spaces, collapse whitespace."""
    return " ".join(text.casefold().translate(_PUNCT).split())


def text_key(text: str) -> int:
    """A stable 64-bit key of the normalised text (Python's hash() changes between processes)."""
    return int.from_bytes(hashlib.blake2b(normalise(text).encode("utf-8"), digest_size=8).digest(), "big")


@dataclass
class Stats:
    rows: int = 0
    runs: int = 0
    retries: int = 0
    duplicates: int = 0
    words_min: int = 10**9
    words_max: int = 0
    words_total: int = 0
    attributed: Counter = field(default_factory=Counter)
    agents: Counter = field(default_factory=Counter)
    tags: Counter = field(default_factory=Counter)
    first_created: str = ""
    last_created: str = ""


def _pick(cum: list[float], x: float) -> int:
    lo, hi = 0, len(cum) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def generate(
    rows: int,
    seed: int,
    buckets: int = 0,
    out=None,
    queries: int = 0,
    duplicate_rate: float = 0.0,
) -> tuple[Stats, list[dict]]:
    """Write ``rows`` JSON lines to ``out`` (a text file, or None to only simulate). Returns the
    stats and, when ``queries`` > 0, the query set."""
    rng = random.Random(seed)
    qrng = random.Random(seed * 7919 + 17)  # queries must not disturb the corpus stream
    n_personas = max(8, rows // 400)
    personas = make_personas(rng, n_personas, buckets)
    # Heavier and lighter users: Zipf-like weights.
    weights = [1.0 / (1 + (i % 97)) ** 0.6 for i in range(n_personas)]
    rng.shuffle(weights)
    total_w = sum(weights)
    cum, acc = [], 0.0
    for w in weights:
        acc += w / total_w
        cum.append(acc)
    agent_names = [a for a, _ in AGENTS]
    agent_cum, acc = [], 0.0
    for _, w in AGENTS:
        acc += w
        agent_cum.append(acc)
    kinds = _kind_tables()

    seen: set[int] = set()
    stats = Stats()
    reservoir: list[tuple[int, dict, str, str]] = []  # (row, memory, kind, query text)
    pool_size = max(queries * 4, 0)
    candidates = 0
    buf: list[str] = []
    recent: list[str] = []  # for intentional duplicates
    dumps = json.dumps
    row = 0
    while row < rows:
        p = personas[_pick(cum, rng.random())]
        agent = agent_names[_pick(agent_cum, rng.random())]
        funcs, kcum = kinds[agent]
        run_len = min(rng.randint(5, 30), rows - row)
        run_id = f"run-{rng.getrandbits(48):012x}"
        # Time advances with the position in the file (a chronological stream of sessions), so every
        # persona's runs, and the facts that change in them, come in order.
        p.clock = WINDOW_DAYS * row / rows
        start = WINDOW_START + timedelta(days=int(p.clock), seconds=rng.randint(6 * 3600, 22 * 3600))
        t = start
        stats.runs += 1
        for _ in range(run_len):
            t += timedelta(seconds=rng.randint(5, 900))
            if duplicate_rate and recent and rng.random() < duplicate_rate:
                content, tags, q = rng.choice(recent), ("preference",), None
                attributed = "user"
            else:
                assistant = rng.random() < 0.2
                for _attempt in range(8):
                    if assistant:
                        content, tags, q = t_assistant(rng, p, t)
                    else:
                        content, tags, q = funcs[_pick(kcum, rng.random())](rng, p, t)
                    words = content.count(" ") + 1
                    h = text_key(content)
                    if MIN_WORDS <= words <= MAX_WORDS and h not in seen:
                        break
                    stats.retries += 1
                seen.add(h)
                attributed = "assistant" if assistant else "user"
            k = rng.choices((0, 1, 2, 3), (0.2, 0.4, 0.3, 0.1))[0]
            hint_tags = list(tags[:k])
            for extra in RELATED_TAGS[tags[0]]:
                if len(hint_tags) >= k:
                    break
                if extra not in hint_tags:
                    hint_tags.append(extra)
            memory = {
                "content": content,
                "attributed_to": attributed,
                "agent_id": agent,
                "run_id": run_id,
                "hint_tags": hint_tags,
                "created_at": t.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            if buckets:
                memory["bucket"] = p.bucket
            if out is not None:
                buf.append(dumps(memory, ensure_ascii=False))
                if len(buf) >= 20000:
                    out.write("\n".join(buf) + "\n")
                    buf.clear()
            if q is not None and queries:
                candidates += 1
                if qrng.random() < 0.4:  # sometimes the full name, as a user naming someone would
                    q = (q[0], q[1].replace(p.first, p.full, 1))
                if len(reservoir) < pool_size:
                    reservoir.append((row, memory, q[0], q[1]))
                else:
                    j = qrng.randrange(candidates)
                    if j < pool_size:
                        reservoir[j] = (row, memory, q[0], q[1])
            if duplicate_rate:
                recent.append(content)
                if len(recent) > 200:
                    recent.pop(0)
            words = content.count(" ") + 1
            stats.rows += 1
            stats.words_total += words
            stats.words_min = min(stats.words_min, words)
            stats.words_max = max(stats.words_max, words)
            stats.attributed[attributed] += 1
            stats.agents[agent] += 1
            stats.tags.update(hint_tags)
            stats.first_created = min(stats.first_created or memory["created_at"], memory["created_at"])
            stats.last_created = max(stats.last_created, memory["created_at"])
            row += 1
    if out is not None and buf:
        out.write("\n".join(buf) + "\n")
    return stats, build_queries(qrng, reservoir, queries, buckets)


def build_queries(qrng: random.Random, pool: list, count: int, buckets: int) -> list[dict]:
    """Pick ``count`` queries from the pool, spread over kinds, deduplicated by text; about one in
    eight gets filters that its source row satisfies."""
    if not count:
        return []
    by_kind: dict[str, list] = {}
    for item in sorted(pool, key=lambda x: x[0]):
        by_kind.setdefault(item[2], []).append(item)
    for items in by_kind.values():
        qrng.shuffle(items)
    chosen, texts = [], set()
    kinds = sorted(by_kind)
    while len(chosen) < count and any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind] and len(chosen) < count:
                item = by_kind[kind].pop()
                if item[3] not in texts:
                    texts.add(item[3])
                    chosen.append(item)
    chosen.sort(key=lambda x: x[0])
    out = []
    for i, (row, memory, kind, text) in enumerate(chosen, 1):
        q: dict = {"id": f"q{i:04d}", "query": text, "kind": kind, "source_row": row}
        if buckets:
            q["bucket"] = memory["bucket"]
        if qrng.random() < 0.125:
            q["filters"] = _filters_for(qrng, memory)
        out.append(q)
    return out


def _filters_for(qrng: random.Random, memory: dict) -> dict:
    choice = qrng.choice(("agent_id", "run_id", "attributed_to", "hint_tags", "window"))
    if choice == "hint_tags" and memory["hint_tags"]:
        return {"hint_tags": [qrng.choice(memory["hint_tags"])]}
    if choice == "window":
        t = datetime.strptime(memory["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        return {
            "created_after": (t - timedelta(days=qrng.randint(1, 60))).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "created_before": (t + timedelta(days=qrng.randint(1, 60))).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    if choice == "attributed_to":
        return {"attributed_to": memory["attributed_to"]}
    if choice == "run_id":
        return {"run_id": memory["run_id"]}
    return {"agent_id": memory["agent_id"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Generate a deterministic corpus of agent memories (JSON lines).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=100_000, help="memories to generate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="output JSONL path (omit to only write queries or stats)")
    parser.add_argument("--buckets", type=int, default=0, help="spread personas over N buckets (adds 'bucket')")
    parser.add_argument("--queries", type=int, default=0, help="also write this many queries about the corpus")
    parser.add_argument("--queries-out", type=Path, help="where the queries go (JSONL)")
    parser.add_argument(
        "--duplicate-rate",
        type=float,
        default=0.0,
        help="fraction of rows that repeat a recent row verbatim (to exercise dedup); default 0",
    )
    parser.add_argument("--stats", action="store_true", help="print statistics (word counts, duplicates) at the end")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be positive")
    if args.queries and not args.queries_out:
        parser.error("--queries needs --queries-out")
    if not 0.0 <= args.duplicate_rate < 0.5:
        parser.error("--duplicate-rate must be in [0, 0.5)")

    started = time.perf_counter()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
            stats, queries = generate(args.rows, args.seed, args.buckets, fh, args.queries, args.duplicate_rate)
    else:
        stats, queries = generate(args.rows, args.seed, args.buckets, None, args.queries, args.duplicate_rate)
    elapsed = time.perf_counter() - started
    if args.queries_out:
        args.queries_out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.queries_out, "w", encoding="utf-8", newline="\n") as fh:
            for q in queries:
                fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    where = f" to {args.out}" if args.out else ""
    print(
        f"generated {stats.rows} memories in {stats.runs} runs{where} in {elapsed:.1f}s"
        + (f"; {len(queries)} queries to {args.queries_out}" if args.queries_out else ""),
        file=sys.stderr,
    )
    if args.stats:
        print_stats(stats, args.out)
    return 0


def print_stats(stats: Stats, path: Path | None) -> None:
    print(
        f"words per memory: min {stats.words_min}, mean {stats.words_total / max(stats.rows, 1):.1f}, "
        f"max {stats.words_max}; generator retries {stats.retries}"
    )
    print(f"created_at: {stats.first_created} .. {stats.last_created}")
    print("attributed_to: " + ", ".join(f"{k} {v / stats.rows:.1%}" for k, v in stats.attributed.most_common()))
    print("agent_id: " + ", ".join(f"{k} {v / stats.rows:.1%}" for k, v in stats.agents.most_common()))
    print("hint_tags: " + ", ".join(f"{k} {v}" for k, v in stats.tags.most_common()))
    if path:
        counts: Counter = Counter()
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                counts[normalise(json.loads(line)["content"])] += 1
        dups = sum(c - 1 for c in counts.values() if c > 1)
        print(f"duplicates by normalised text: {dups} of {stats.rows} ({dups / stats.rows:.3%})")


if __name__ == "__main__":
    sys.exit(main())
