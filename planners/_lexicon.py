"""Words that name the same need: how users ask versus how APIs describe themselves.

A user asks "do I need an umbrella tomorrow" of a catalog that says "daily forecast,
precipitation chance"; lexical ranking finds no shared word. Each group below gathers the
everyday words and the API words of one common need; a query word of a group also looks
for the group's other words, at a lower weight (:data:`planners._ranking.RELATED_WEIGHT`),
so an exact match still ranks first.

The groups are general-purpose (the needs tool catalogs serve most often: weather, maps,
money, markets, messages, calendars, files, commerce, travel, food, jobs, media, ...),
written from common usage rather than from any benchmark's questions; their effect is
measured with ``benchmarks/selection.py``.
"""

from __future__ import annotations

GROUPS: tuple[str, ...] = (
    # weather and environment
    "weather forecast temperature rain umbrella snow sunny cloudy wind storm humidity "
    "precipitation hot cold celsius fahrenheit climate",
    "air pollution pollutant smog quality aqi ozone",
    # places and travel
    "address location place map coordinates latitude longitude geocode where nearby near",
    "route directions drive driving walk walking commute distance travel trip navigation",
    "flight flights airline airport plane fly boarding",
    "hotel hotels accommodation lodging stay room booking motel hostel",
    "rent rental renting lease apartment house housing property landlord tenant",
    "timezone time clock hour utc offset",
    # money and markets
    "currency exchange convert conversion dollar euro yen pound usd eur gbp forex fx",
    "crypto cryptocurrency bitcoin ethereum blockchain token coin wallet nft defi",
    "stock stocks share shares ticker equity market trading nasdaq nyse dividend investor",
    "invoice bill billing charge payment pay paid refund owe owes money",
    "subscription plan renew renewal cancel recurring membership",
    "price cost cheap cheapest expensive quote rate fee",
    "bank account balance transaction transfer deposit withdraw",
    "tax taxes vat deduction",
    # messages and people
    "email mail inbox message send letter reply",
    "chat message sms text notify notification slack",
    "calendar meeting appointment schedule event invite availability free busy book",
    "contact person people customer client lead address book crm",
    "deal opportunity sale sales pipeline prospect",
    "ticket issue incident support helpdesk problem bug",
    "task todo reminder checklist",
    # documents and data
    "file files document folder upload download storage drive attachment pdf",
    "translate translation language english spanish french german japanese chinese",
    "summarize summary summarise digest tldr",
    "search find lookup look query discover",
    "image picture photo photograph pic",
    "video youtube clip movie film stream",
    "music song songs playlist album artist lyrics",
    "news headline headlines article articles story stories press",
    "research paper papers academic scholar study journal citation",
    "code program programming developer github repository script",
    "web website page url link site browse",
    # everyday life
    "recipe recipes cook cooking dish meal food ingredient ingredients dinner lunch",
    "restaurant restaurants eat dining cafe",
    "diet calorie calories nutrition nutritional fitness exercise workout health",
    "job jobs career hiring resume employment work vacancy",
    "shopping shop buy purchase order product store ecommerce",
    "ship shipping parcel package delivery track tracking courier carrier",
    "game games play gaming card cards",
    "book books read reading novel author library",
    "learn learning course courses tutorial teach study education",
    "sport sports football soccer basketball baseball tennis score scores match team league "
    "player",
    # more of the needs public API directories group their services by
    "movie movies film films cinema actor actress director cast tv show series episode",
    "podcast podcasts episode radio audio",
    "health medical doctor symptom symptoms disease medicine drug drugs hospital patient",
    "car cars vehicle vehicles auto automobile vin dealer",
    "real estate property home homes house listing listings realtor mortgage",
    "event events concert concerts ticket tickets festival venue",
    "social twitter instagram facebook tiktok post posts follower followers profile",
    "marketing seo keyword keywords ranking traffic campaign ads advertising",
    "qr barcode code scan",
    "url link shorten shortener redirect",
    "pdf document convert conversion docx word",
    "spreadsheet excel csv table sheet",
    "chart graph plot visualize visualization diagram",
    "math calculate calculator compute equation formula arithmetic",
    "unit units convert conversion measure measurement metric imperial",
    "date day days calendar weekday holiday holidays",
    "password security secure hash encrypt encryption vulnerability",
    "ip network dns domain whois host hosting server",
    "phone number call sms verify validation",
    "dictionary define definition meaning word words synonym",
    "quote quotes joke jokes fact facts trivia fun",
    "random generate generator lottery dice",
    "space astronomy nasa planet planets star stars satellite rocket",
    "animal animals pet pets dog dogs cat cats",
    "charity donate donation nonprofit",
    "energy electricity power solar fuel gas emissions carbon",
    "company business firm corporation organization enterprise",
    "user users account profile login signup",
    "review reviews rating ratings feedback opinion",
    "ai chatbot assistant gpt generate generation",
    "draw drawing design logo art illustration",
    "law legal lawyer contract court regulation",
    "government public census population statistics",
)
