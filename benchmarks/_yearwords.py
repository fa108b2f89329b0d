"""Word lists of the year fixture (benchmarks/_year.py), written for it: no text of any public
benchmark. Base forms only; _year.py inflects them (plurals, -s/-ed/-ing, -ly, -er/-est) into
several thousand distinct surface words."""

from __future__ import annotations

__all__ = ["NOUNS", "VERBS", "ADJECTIVES", "ADVERBS", "FUNCTION", "IRREGULAR_PAST",
           "FIRST_NAMES", "LAST_NAMES", "PLACES", "ZH_NAMES", "ZH_PLACES", "ZH_NOUNS",
           "ZH_VERBS", "ZH_ADJ", "REPLIES", "ZH_REPLIES", "WEEKDAYS", "MONTHS", "CURRENCIES"]

NOUNS = """
account address advice afternoon age agenda airport alarm album allergy ankle answer
apartment apple appointment apron area argument arm arrival article artist aunt avocado
baby backpack bag bakery balcony ball banana band bank basement basket bath bathroom battery
beach bean bear bed bedroom bee beer bell belt bench bicycle bill bird birthday biscuit
blanket blender block blood blouse board boat body boiler bolt bone book bookshelf boot
border bottle bowl box boyfriend bracelet brain branch bread breakfast brick bride bridge
brother brush bucket budget bug building bulb bus business butter button cabin cabinet cable
cafe cake calendar camera campsite candle candy canoe cap car card carpet carrot cart case
cash castle cat ceiling cellar chain chair chapter charger cheese chef cherry chest chicken
child chimney chocolate choir church cinema circle city class classroom clinic clock closet
cloud club coach coast coat code coffee coin collar colleague college concert contract
cook cookie corner cottage couch cough counter country course court cousin cow crab crack
cream credit crew crowd cup cupboard curtain cushion customer dance daughter deadline deal
debt deck degree delivery dentist deposit desk dessert diary dictionary diet dinner dish
doctor dog doll door doorbell drawer dream dress drill driver drum duck dust ear earring
earth egg elbow election elevator email engine entrance envelope errand evening event exam
exercise eye fabric face factory fair family farm father faucet fee fence ferry festival
fever field file film finger fire fish flat flight floor flour flower flu flute folder food
foot forest fork form fountain fox frame fridge friend frog fruit fuel funeral furnace
furniture game garage garden garlic gate gift ginger girlfriend glass glove goat gold golf
grandfather grandmother grape grass grill grocery guest guitar gym habit hair haircut hall
hallway ham hammer hand handle harbor hat headache heater hedge helmet highway hill hobby
holiday home homework honey horse hospital hotel hour house husband ice idea illness inbox
ink insurance interview invoice island jacket jam jar jeans jewelry job journey juice jump
kettle key keyboard kid kitchen kite knee knife ladder lake lamp laptop laundry lawn lawyer
leaf lease lecture leg lemon lesson letter library license lid light lime list living loan
lock locker lunch machine magazine mail manager map market match meal meat mechanic medicine
meeting melon menu message microwave milk minute mirror mistake mixer mom money monitor month
moon morning mortgage mother motor mountain mouse mouth movie muffin museum mushroom music
nail napkin neck necklace needle neighbor nephew nest net newspaper niece night noodle noon
nose note notebook nurse nut oak ocean office oil omelet onion orange orchard oven owner
package page pain paint painting pair pan pancake pants paper parcel parent park parking
party passport password pasta patio payment pea peach pear pen pencil pepper permit pet
pharmacy phone photo piano picnic picture pie pill pillow pilot pipe pizza plan plane plant
plate platform player playground plumber pocket poem police pond pool porch post postcard
pot potato pottery powder present price printer problem project pump pumpkin puppy purse
puzzle question queue quilt rabbit radio rain raincoat receipt recipe record refund rent
repair report reservation restaurant rice ring river road robot roof room root rope rose
router rug ruler sack salad salary sale salmon salt sandwich sauce sausage scarf schedule
school scissors score screen screw sea seat seed shampoo shed sheep shelf shell ship shirt
shoe shop shoulder shower sign signal singer sink sister skirt sky sleeve slide snack snake
snow soap sock sofa soil soldier son song soup space speaker spider spinach sponge spoon
sport spring square stadium staff stage stair stamp station steak stew stick stomach stone
storm story stove street student studio subway sugar suit suitcase summer sun supper surgery
sweater swing table tablet tail tap taxi tea teacher team teapot teeth telescope tent test
thumb ticket tie tiger tile timer tire toast toe toilet tomato tongue tool toothbrush towel
tower town toy track tractor traffic trail train tray tree trip truck trumpet tunnel turkey
turtle umbrella uncle uniform university vacation valley van vase vegetable vest village
violin visa visitor voice wagon waiter wall wallet wardrobe warranty washer watch water
wave weather website wedding week weekend wheel whistle wife window wine winter wire wolf
wood wool word work workshop wrench yard yogurt zipper zoo
""".split()

VERBS = """
accept add admire agree allow answer apologize appear arrange arrive ask attach avoid bake
believe belong board boil book borrow bother bounce brush burn call cancel carry celebrate
change charge chase check cheer chew clean clear climb close collect comb complain confirm
connect consider contact cook copy correct cough count cover crash cross cry cycle damage
dance decide deliver describe design destroy develop discover discuss divide double drag
dress drop dry earn empty enjoy enter escape expect explain fail fill finish fix flash float
flood fold follow forward fry gather glue grab greet guess hammer hand hang happen harm hate
heat help hope hug hunt hurry identify ignore imagine improve include increase inform insist
install introduce invent invite iron jog join joke judge jump kick kiss knock label land
last laugh learn lift like limit list listen live load lock look love manage mark marry
match measure melt mend miss mix move need nod notice obey offer open order organize own
pack paint park pass pause peel perform phone pick plan plant play please point polish pour
practice pray prefer prepare press pretend print promise protect pull pump punch push
question rain reach receive record recycle refuse relax release remember remind remove rent
repair repeat replace reply report request rescue reserve rest return rinse rub rush sail
save scan scrub search serve settle share shave shop sign skip slip smell smile sneeze snow
solve sort spell spill spray start stay step stir stop store stretch study subtract suggest
supply support suppose surprise switch talk taste test thank tick tidy tie touch tour trace
trade train transfer travel treat trim trust try turn type unlock unpack update upload use
vacuum visit wait walk wander want warm wash watch water wave weigh welcome whisper wipe
wish wonder work worry wrap yawn
""".split()

# irregular pasts of verbs above and a few common ones used as-is
IRREGULAR_PAST = {"buy": "bought", "bring": "brought", "catch": "caught", "come": "came",
                  "drink": "drank", "drive": "drove", "eat": "ate", "fall": "fell",
                  "feel": "felt", "find": "found", "fly": "flew", "forget": "forgot",
                  "get": "got", "give": "gave", "go": "went", "have": "had", "hear": "heard",
                  "hold": "held", "keep": "kept", "know": "knew", "leave": "left",
                  "lend": "lent", "lose": "lost", "make": "made", "meet": "met", "pay": "paid",
                  "put": "put", "read": "read", "ride": "rode", "ring": "rang", "run": "ran",
                  "say": "said", "see": "saw", "sell": "sold", "send": "sent", "sing": "sang",
                  "sit": "sat", "sleep": "slept", "speak": "spoke", "spend": "spent",
                  "stand": "stood", "swim": "swam", "take": "took", "teach": "taught",
                  "tell": "told", "think": "thought", "throw": "threw", "wake": "woke",
                  "wear": "wore", "win": "won", "write": "wrote"}

ADJECTIVES = """
able afraid angry annoyed anxious awful bad beautiful big bitter black blue bored boring
brave bright broken brown busy calm careful cheap cheerful clean clear clever close cloudy
cold comfortable common cool crazy creamy crisp crowded cute damp dark dear deep delicious
different difficult dirty dizzy dry dull early easy empty enormous exciting expensive fair
famous fancy fast fat fine firm flat fresh friendly full funny gentle giant glad golden good
gray great green grumpy happy hard healthy heavy helpful high honest hot huge humid hungry
icy ill important kind large late lazy light little local lonely long loose loud lovely low
lucky mild modern muddy narrow nasty neat nervous new nice noisy normal odd old orange plain
pleasant polite poor popular pretty private proud public purple quick quiet rainy rare raw
ready real red rich rough round rude sad safe salty sharp short shy sick silly simple slow
small smart smooth soft sore sour spicy steep sticky strange strict strong sunny sweet tall
tasty terrible thick thin thirsty tidy tight tiny tired tough warm weak wet white wide wild
windy wise wooden worried wrong yellow young
""".split()

ADVERBS = """
again almost already also always anyway around away back barely certainly clearly
definitely early easily especially even eventually exactly finally fortunately here
honestly hopefully immediately instead just later maybe meanwhile mostly nearly never
normally now obviously often once only perhaps probably quickly rarely really recently
seriously simply slowly sometimes soon still suddenly surely then there today together
tomorrow tonight too usually very yesterday yet
""".split()

FUNCTION = """
a an the and but or so because if when while before after until since though although
of to in on at for with from by about into over under between through during without
i you he she it we they me him her us them my your his its our their this that these those
is are was were be been being am do does did have has had will would can could should may
might must not no yes all some any every each both few many much more most other another
such what which who whom whose where why how there here than then just only also very
""".split()

FIRST_NAMES = """
Aaron Abigail Adam Adrian Aiden Alan Albert Alex Alice Amanda Amber Amy Andrea Andrew Angela
Anna Anthony Arthur Ashley Austin Barbara Ben Beth Bianca Bill Brandon Brenda Brian Caleb
Cameron Carl Carla Carmen Carol Caroline Catherine Charles Charlotte Chloe Chris Claire Colin
Connor Craig Daisy Daniel Dave Dean Deborah Dennis Diana Diego Dylan Eddie Edith Eleanor
Elena Eli Elise Emily Emma Eric Erin Ethan Eva Evan Fatima Felix Fiona Frank Gabriel Gary
George Gina Grace Greg Hannah Harold Harry Hazel Heather Helen Henry Holly Hugo Ian Irene
Isaac Isabel Ivan Jack Jacob Jade James Jane Jason Jean Jenny Jeremy Jessica Joan Joel John
Jordan Jose Joseph Joshua Joyce Julia Julian Justin Karen Kate Keith Kevin Kim Kyle Laura
Lauren Leah Leo Liam Lily Linda Lisa Logan Lucas Lucy Luis Luke Maria Marcus Mark Martha
Martin Mary Mason Matt Maya Megan Melissa Mia Michael Michelle Mike Miles Molly Nadia Naomi
Nathan Neil Nicole Nina Noah Nora Oliver Olivia Omar Oscar Owen Pablo Pamela Patrick Paul
Peter Philip Rachel Ralph Rebecca Ricardo Rita Robert Robin Rosa Ruby Ryan Sally Sam Samuel
Sandra Sara Scott Sean Sophie Stella Steve Susan Tara Teresa Thomas Tim Tina Todd Tom Tony
Tracy Tyler Uma Valerie Victor Vincent Violet Walter Wendy Will Yara Yusuf Zach Zoe
""".split()

LAST_NAMES = """
Abbott Alvarez Bailey Baker Banks Barker Bell Bennett Brooks Burke Carter Castillo Chen Clark
Cole Collins Cooper Cruz Davis Diaz Dixon Duncan Edwards Ellis Evans Fischer Fleming Ford
Foster Garcia Gibson Gordon Graham Grant Gray Green Hall Hansen Harper Hayes Hill Holmes
Howard Hughes Hunter Jensen Johnson Jordan Kelly Kim Klein Lambert Larsen Lee Lewis Lopez
Marsh Martin Mason Meyer Mills Moore Morgan Murphy Nguyen Novak Olsen Owens Palmer Park
Patel Perry Porter Price Reed Reyes Rivera Roberts Ross Russell Santos Schmidt Shaw Silva
Singh Stone Sullivan Taylor Turner Walker Wallace Ward Watson Webb Wells West Wood Young
""".split()

PLACES = """
Amsterdam Athens Austin Barcelona Bergen Berlin Bologna Boston Brighton Bristol Brussels
Budapest Cairo Calgary Chicago Copenhagen Cork Denver Dublin Edinburgh Florence Geneva Glasgow
Granada Hamburg Helsinki Kyoto Lisbon Liverpool London Lyon Madrid Malaga Manchester
Marseille Melbourne Milan Montreal Munich Nairobi Naples Nice Oslo Ottawa Oxford Paris Perth
Portland Porto Prague Quebec Riga Rome Rotterdam Salzburg Seattle Seville Sydney Tallinn
Tokyo Toronto Turin Valencia Vancouver Venice Vienna Vilnius Warsaw Wellington York Zurich
""".split()

WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = ("January February March April May June July August September October November "
          "December").split()
CURRENCIES = [("$", ""), ("€", ""), ("£", ""), ("", " dollars"), ("", " euros"), ("¥", "")]

REPLIES = ["ok, thanks", "ok", "thanks!", "sure", "sounds good", "got it", "will do",
           "no problem", "great, see you then", "yes please", "not yet", "maybe later",
           "haha", "perfect", "ok, noted", "thank you so much", "on my way", "done",
           "let me check", "talk soon", "good night", "see you", "agreed", "fine by me",
           "that works", "oh no", "really?", "nice!", "cool", "all set"]

# Chinese: names, places, and words for the sentence templates (written for this fixture)
ZH_NAMES = """
王芳 李娜 张伟 刘洋 陈静 杨帆 赵磊 黄丽 周杰 吴敏 徐强 孙悦 马超 朱婷 胡军 郭涛 何琳 林峰
高原 罗欣 郑浩 梁晨 宋佳 谢宇 唐诗 韩雪 冯凯 董洁 程亮 曹阳 袁媛 邓辉 许晴 傅雷 沈青 曾毅
""".split()

ZH_PLACES = """
北京 上海 杭州 南京 苏州 成都 重庆 西安 武汉 长沙 广州 深圳 厦门 青岛 大连 昆明 桂林 哈尔滨
天津 宁波 合肥 郑州 济南 福州 贵阳 拉萨 三亚 丽江 洛阳 无锡
""".split()

ZH_NOUNS = """
咖啡机 洗衣机 冰箱 空调 热水器 电饭煲 微波炉 吸尘器 路由器 打印机 笔记本 手机 耳机 充电器
钥匙 钱包 雨伞 背包 行李箱 护照 签证 机票 火车票 门票 发票 合同 保险 房租 水电费 快递
包裹 外卖 菜单 早餐 午饭 晚饭 水果 蔬菜 牛奶 面包 鸡蛋 米饭 面条 饺子 火锅 蛋糕 茶叶
医院 牙医 体检 感冒 发烧 药店 医生 护士 老师 学校 作业 考试 图书馆 电影 音乐会 演唱会
钢琴 吉他 画展 博物馆 公园 超市 商场 银行 邮局 车站 机场 地铁 公交 出租车 自行车 停车场
花园 阳台 厨房 卧室 客厅 浴室 屋顶 窗户 门锁 灯泡 沙发 书架 桌子 椅子 床单 窗帘 地毯
猫粮 狗粮 小猫 小狗 金鱼 植物 花盆 种子 天气 台风 暴雨 雪 太阳 月亮 周末 假期 生日 婚礼
会议 项目 报告 邮件 预算 工资 面试 同事 老板 客户 邻居 朋友 家人 父母 孩子 奶奶 爷爷
""".split()

ZH_VERBS = """
修理 预订 取消 购买 寄出 收到 打扫 整理 准备 安排 检查 更换 清洗 打包 搬家 还书 借书
报名 参加 提交 确认 提醒 联系 讨论 出发 到达 等待 学习 练习 散步 跑步 游泳 做饭 烤 煮
""".split()

ZH_ADJ = """
便宜 贵 干净 漂亮 安静 热闹 方便 麻烦 新鲜 好吃 舒服 暖和 凉快 潮湿 干燥 忙 累 开心 着急
""".split()

ZH_REPLIES = ["好的，谢谢", "收到", "没问题", "好的", "明白了", "稍等一下", "谢谢你",
              "我看看", "行", "辛苦了", "晚安", "一会儿见", "太好了", "知道了"]
